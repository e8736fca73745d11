"""Every declared parameter of every study refuses every wrong type and every empty value with an error that names
it (issue 44, item 13). The parameters are found through cnnlab.studies' declarations, not listed here, so one added
later is fuzzed too; the wrong values follow from what its presets hold (an int, a float, a name, a list of them)."""

import math
import re

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pytest

from cnnlab import config, studies

DECLARED = [(study, name) for study in studies.STUDIES for name in studies.load(study).PARAMETERS.declared]
MISSPELT = "no-such-value"
# Wrong for every parameter, whatever it takes: empty and nested containers, text that names nothing, numbers that
# are not finite, negative or absurdly large.
WRONG = [{}, [[1]], {"a": 1}, [{"a": 1}], "", " ", MISSPELT, [MISSPELT], [None], math.nan, math.inf, -math.inf,
         [math.nan], -1, [-1], 10**12, [10**12], 1e300, "[1,"]
EMPTY = [[], (), "[]"]  # an empty list (papermill passes text): wrong unless the parameter declares what it means
# Wrong by kind: a bool where a number or a name goes (True is 1 to Python); a float or text where an int goes;
# a number or its text where True or False goes; a number where a name goes.
BY_KIND = {int: [2.5, [2.5], True, [True], 1e-300, "4"], float: [True, [True], "0.5"],
           bool: [1, 0, "True", [1], 2.5], str: [1, 2.5, True, [1]]}


@pytest.fixture(autouse=True)
def _many_cores(monkeypatch):
    """Every preset configures on a machine with enough cores: the paper's 4 processes are valid on 64 cores."""
    monkeypatch.setattr(config, "cores", lambda: 64)


def _kind(parameter: studies.Parameter) -> type:
    """What one value of ``parameter`` is (int, float, bool or str): its type hint's, a list's element's."""
    hint = parameter.hint().removeprefix("list[").removesuffix("]")
    return {"int": int, "float": float, "bool": bool}.get(hint, str)


def _refused(module, preset: str, name: str, value) -> str:
    """"" if ``configure`` refuses ``value`` for ``name`` with an error naming it and its valid values, else what
    went wrong."""
    try:
        cfg = module.configure(preset, **{name: value})
    except (ValueError, TypeError) as err:
        if not re.search(rf"\b{name}\b", str(err)):
            return f"{type(err).__name__} not naming {name}: {err}"
        return "" if re.search(r"valid|must be", str(err)) else f"no valid values in: {err}"
    return f"accepted as {getattr(cfg, name)!r}"


@pytest.mark.parametrize("study", studies.STUDIES)
def test_every_presets_defaults_are_valid(study):
    module = studies.load(study)
    for preset in config.PRESETS:
        cfg = module.configure(preset)
        assert cfg.preset == preset and set(module.PARAMETERS.declared) <= set(vars(cfg))


@pytest.mark.parametrize("study, name", DECLARED, ids=[f"{s}.{n}" for s, n in DECLARED])
def test_every_wrong_value_is_refused_naming_the_parameter(study, name):
    module = studies.load(study)
    parameter = module.PARAMETERS.declared[name]
    kind = _kind(parameter)
    wrong = WRONG + BY_KIND[kind] + ([] if parameter.empty else EMPTY)
    if kind is float and _refused(module, "quick", name, 0.0) == "":
        wrong.append(1e-300)  # where 0 is not valid, 1e-300 is 0 in all but name
    failures = [f"{preset}: {name}={value!r}: {problem}" for preset in config.PRESETS for value in wrong
                if (problem := _refused(module, preset, name, value))]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("study, name", DECLARED, ids=[f"{s}.{n}" for s, n in DECLARED])
def test_none_takes_the_presets_value_and_its_check_refuses_it_where_no_preset_uses_it(study, name):
    module = studies.load(study)
    parameter = module.PARAMETERS.declared[name]
    for preset in config.PRESETS:  # None in configure (papermill's default): the preset's value
        assert getattr(module.configure(preset, **{name: None}), name) == getattr(module.configure(preset), name)
    if parameter.check is not None and None not in parameter.values().values():
        with pytest.raises((ValueError, TypeError), match=rf"\b{name}\b"):
            parameter.check(None, parameter=name)


@pytest.mark.parametrize("study, name", [(s, n) for s, n in DECLARED
                                         if studies.load(s).PARAMETERS.declared[n].empty])
def test_an_empty_list_is_valid_only_where_its_meaning_is_declared(study, name):
    module = studies.load(study)
    for preset in config.PRESETS:
        for empty in EMPTY:
            assert getattr(module.configure(preset, **{name: empty}), name) == []

