"""cnnlab.studies.lstm_pruning on a tiny LSTM and synthetic corpus: every table's rows, units and invariants."""

import math

import cnnlab  # noqa: F401
import pandas as pd
import pytest
import torch

from cnnlab import models, plotting, prune, studies
from cnnlab.claims import INCONCLUSIVE
from cnnlab.studies import lstm_pruning as lp
import fakedevice

TINY = dict(vocab_size=300, seq_len=16, train_size=128, test_size=64, embed_dim=8, hidden_size=8, num_layers=2,
            epochs=1, batch_size=32, batch_sizes=[32], num_workers=[0, 99], sweep_fraction=0.5, ratios=[0.5],
            chosen_ratio=0.5, profile_iterations=1, warmup=0, repeats=2, timing_rounds=1, min_rounds=1, max_rounds=1,
            device="cpu")
SWEEPS = ("loader_sweep", "sensitivity")


@pytest.fixture(scope="module")
def cfg():
    return lp.configure("quick", **TINY)


@pytest.fixture(scope="module")
def df(cfg, tmp_path_factory):
    return lp.measure(cfg, tmp_path_factory.mktemp("lstm"), progress=False)


@pytest.fixture(scope="module")
def parts(df):
    return studies.tables(df)


def test_follows_the_study_contract_and_generic_checks(df, parts):
    assert studies.signature_problems(lp) == []
    assert list(parts) == ["training", "training_profile", "profile_rounds", "loader_sweep", "sensitivity",
                          "final_models"]
    assert "results checked" in studies.check_results(df)
    figs = lp.figures(df)
    assert list(figs) == ["06_training_profile", "06_loader_sweep", "06_sensitivity", "06_final_models"]
    for fig in figs.values():
        plotting.plt.close(fig)


def test_baseline_history(parts):
    history = parts["training"]
    assert list(history["epoch"]) == [1]
    assert (history["epoch_time_s"] > 0).all() and history["test_accuracy_pct"].between(0, 100).all()
    assert set(history["data_source"]) == {"synthetic"}


def test_profile_finds_the_lstm_operators(parts):
    table = parts["training_profile"]
    assert table["is_lstm"].any(), "the LSTM's own operators appear"
    assert math.isclose(table["share_pct"].sum(), 100.0, rel_tol=1e-6)
    assert table["share_pct"].is_monotonic_decreasing and set(table["time_kind"]) == {"self CPU time"}


def test_loader_sweep_records_capped_workers(parts):
    df = parts["loader_sweep"]
    ok, skipped = df[df["status"] == "ok"], df[df["status"] == "skipped"]
    assert list(ok["num_workers"]) == [0] and (ok["train_epoch_s"] > 0).all() and (ok["test_epoch_s"] > 0).all()
    assert list(skipped["num_workers"]) == [99] and skipped["train_epoch_s"].isna().all()
    assert skipped["error"].str.contains("os.cpu_count").all()
    assert int(ok["train_items"].iloc[0]) == 64  # sweep_fraction 0.5 of 128
    assert "eval_epoch_s" not in df.columns


def test_sensitivity_rows_and_zero_fractions(cfg, parts):
    df = parts["sensitivity"]
    model = models.get(lp.MODEL, vocab_size=cfg.vocab_size, seq_len=cfg.seq_len, embed_dim=cfg.embed_dim,
                       hidden_size=cfg.hidden_size, num_layers=cfg.num_layers)
    n_targets = len(prune.targets(model))
    assert len(df) == len(cfg.methods) * len(cfg.ratios) * (n_targets + 2) + len(cfg.ratios)
    assert (df["status"] == "ok").all() and df["accuracy_pct"].between(0, 100).all()
    layer = df[df["scope"] == "layer"]
    assert (layer["zero_fraction"] - layer["ratio"]).abs().max() <= 0.5 / 2 + 1e-9  # head has 2 rows
    units = df[df["method"] == "units"]
    assert list(units["zero_fraction"]) == [0.5]


def test_final_comparison_shrinks_only_the_unit_pruned_model(cfg, parts):
    df = parts["final_models"].set_index("variant")
    assert list(df.index) == ["dense", "masked_rows", "masked_units", "unit_pruned"]
    assert df.loc["dense", "hidden_size"] == cfg.hidden_size, "the sensitivity scan pruned copies, not the model"
    assert df.loc["unit_pruned", "hidden_size"] == cfg.hidden_size - round(cfg.chosen_ratio * cfg.hidden_size)
    assert df.loc["unit_pruned", "params"] < df.loc["dense", "params"]
    assert df.loc["masked_rows", "params"] == df.loc["dense", "params"]
    assert df.loc["masked_rows", "nonzero_params"] < df.loc["dense", "nonzero_params"]
    assert df.loc["masked_units", "nonzero_params"] == df.loc["unit_pruned", "nonzero_params"]
    assert df.loc["unit_pruned", "size_mb"] < df.loc["masked_rows", "size_mb"] == df.loc["dense", "size_mb"]
    for col in ("train_epoch_s", "test_epoch_s", "latency_ms_median", "train_step_peak_mem_mib", "size_mb"):
        assert (df[col] > 0).all() and df[col].map(math.isfinite).all(), col
    assert df.loc["dense", "train_speedup"] == 1.0 == df.loc["dense", "overall_speedup"]
    # one timing round (TINY): the overall time is that round's training epoch plus its test pass
    assert (df["overall_s"] == df["train_epoch_s"] + df["test_epoch_s"]).all()


def test_the_final_models_are_timed_in_paired_rounds_until_decided(cfg):
    """Issue 43: the final models' times in paired rounds (every variant once a round, the order reversed every other
    round), each kept round by round, with rounds added at the looks while a final claim is undecided."""
    train_set, test_set = lp.datasets(cfg)
    model = models.get(lp.MODEL, vocab_size=cfg.vocab_size, seq_len=cfg.seq_len, embed_dim=cfg.embed_dim,
                       hidden_size=cfg.hidden_size, num_layers=cfg.num_layers)
    few = dict(min_rounds=2, max_rounds=3)
    # a budget no look fits: the first look (2 rounds) only
    short = lp.final_comparison(model, lp.configure("quick", **{**TINY, **few, "final_budget_s": 0.001}), train_set,
                                test_set).set_index("variant")
    assert (short["rounds"] == 2).all() and short["confidence"].iloc[0] == pytest.approx(1 - 0.05 / 2)
    for col in ("train_epoch_s", "test_epoch_s", "overall_s"):
        times = short[f"round_{col}"].map(lambda text: [float(t) for t in text.split(",")])
        assert (times.map(len) == 2).all(), col
        assert short[col].tolist() == pytest.approx([sorted(ts)[0] / 2 + sorted(ts)[1] / 2 for ts in times], rel=1e-5)
    # 2 rounds give no interval at 97.5% (the claims undecided): within quick's budget the second look's 3 are taken
    more = lp.final_comparison(model, lp.configure("quick", **{**TINY, **few}), train_set,
                               test_set)
    assert (more["rounds"] == 3).all()


def _rounds(*medians, n=8, wobble=0.01):
    """``n`` paired rounds of each median, every round moved by the same relative ``wobble`` (+ in even rounds, - in
    odd ones): the load of a round hits every setting in it alike, as in one process."""
    return tuple(tuple(m * (1 + wobble * (-1) ** r) for r in range(n)) for m in medians)


def _claims_frame(*, lstm_share=(90.0, 91.0, 92.0), epochs=_rounds(1.0, 2.0, 0.5, 0.2),
                  accuracy=(80.0, 78.0, 78.0), layers=((80.0, 79.0, 78.5), (80.5, 78.5, 78.5)), masked=(2.4, 1.2, 11.0),
                  units=(0.8, 0.3, 6.0), spread=0.05, rounds=3, kernel_share=(float("nan"),) * 3,
                  test_items=10_000_000, changed=None, final_rounds=8, paired=True):
    """A hand-built result. lstm_share: the LSTM's share (%) in each profile round; epochs: train epoch s per paired
    round at batch 32 with 0 and 1 workers, then batch 128; accuracy at ratios 0.1, 0.5, 0.9 (dense 80.5%); layers:
    accuracy at those ratios with one layer pruned (the embedding, then lstm.weight_hh_l0; the head, left out of the
    claim, at 50% throughout); masked / units: median (train epoch s, test pass s, step peak MiB) of the pruned
    variants against dense (2.0 s, 1.0 s, 10.0 MiB): ``paired``, in ``final_rounds`` rounds, dense's time +``spread``
    (relative) in even rounds and -``spread`` in odd ones, the variants' the other way round (the per-round ratios
    scatter: the load is not shared); else as a table stored before paired rounds, each time within +- ``spread`` over
    ``rounds`` rounds (floored at x/1.25 to x*1.25). Accuracies on ``test_items`` items (ten million by default: intervals of a few
    hundredths of a point, so the claim is decided), unpaired; ``changed``: the share of items the pruned model gets
    right and dense wrong, with the discordant counts recorded (paired), the drop's items the other way."""
    profile = pd.DataFrame({"round": range(len(lstm_share)), "lstm_share_pct": lstm_share,
                            "kernel_share_pct": kernel_share[:len(lstm_share)], "time_kind": "self CPU time",
                            "iterations": 3})
    loaders = pd.DataFrame([{"status": "ok", "batch_size": b, "num_workers": w, "round": r, "train_epoch_s": t,
                             "num_workers_cap": 2}
                            for (b, w), times in zip([(32, 0), (32, 1), (128, 0), (128, 1)], epochs)
                            for r, t in enumerate(times)])
    sens = pd.DataFrame({"scope": "all_layers", "tensor": "all but head",
                         "method": ["ln_structured"] * 3 + ["l1_unstructured"] * 3, "status": "ok",
                         "ratio": [0.1, 0.5, 0.9] * 2, "accuracy_pct": [*accuracy, 80.0, 79.5, 70.0]})
    tensors = ("embedding.weight", "lstm.weight_hh_l0", "head.weight")
    layer = pd.DataFrame([{"scope": "layer", "tensor": t, "method": "ln_structured", "status": "ok", "ratio": r,
                           "accuracy_pct": a} for t, accs in zip(tensors, (*layers, (50.0,) * 3))
                          for r, a in zip((0.1, 0.5, 0.9), accs)])
    sens = pd.concat([sens, layer], ignore_index=True).assign(dense_accuracy_pct=80.5, test_items=test_items)
    if changed is not None:
        sens["correct_only_pruned"] = round(changed * test_items)
        sens["correct_only_dense"] = sens["correct_only_pruned"] + ((80.5 - sens["accuracy_pct"]) / 100 * test_items
                                                                    ).round().astype(int)
    final = pd.DataFrame({"variant": ["dense", "masked_rows", "unit_pruned"], "ratio": [0.0, 0.5, 0.5],
                          "train_epoch_s": [2.0, masked[0], units[0]], "test_epoch_s": [1.0, masked[1], units[1]],
                          "train_step_peak_mem_mib": [10.0, masked[2], units[2]],
                          "latency_ms_median": [10.0, 11.0, 5.0], "timing_rounds": rounds,
                          "nonzero_params": [100, 50, 50], "size_mb": [1.0, 1.0, 0.5]})
    final["overall_s"] = final["train_epoch_s"] + final["test_epoch_s"]
    for col, name in (("train_epoch_s", "train"), ("test_epoch_s", "test"), ("overall_s", "overall")):
        final[f"{col}_min"], final[f"{col}_max"] = final[col] * (1 - spread), final[col] * (1 + spread)
        final[f"{name}_speedup"] = final[col].iloc[0] / final[col]
        if paired:
            final[f"round_{col}"] = [", ".join(f"{m * (1 + spread * (-1) ** (r + (k > 0))):.6g}"
                                               for r in range(final_rounds)) for k, m in enumerate(final[col])]
    if paired:
        final = final.drop(columns="timing_rounds").assign(rounds=final_rounds, confidence=0.95)
    return pd.concat([part.assign(experiment=name) for name, part in (
        ("profile_rounds", profile), ("loader_sweep", loaders), ("sensitivity", sens), ("final_models", final))])


CLAIMS = ["the LSTM layers are the bottleneck of a training step",
          "GPU kernels take most of a training step (the paper's execution summary)",
          "0 DataLoader workers give the fastest training epoch",
          "batch size 128 gives the fastest training epoch",
          "accuracy is insensitive to the structured pruning ratio up to 0.9",
          "no layer alone is sensitive to the structured pruning ratio up to 0.9",
          "structured pruning is preferred to unstructured",
          *(f"pruning by {words} {what}" for words in ("structured masks (the paper's final model)",
                                                       "removing hidden units (beyond the paper)")
            for what in ("speeds a training epoch plus a test pass up as much as the paper's",
                         "cuts training and test time", "cuts memory"))]
I = {claim: i for i, claim in enumerate(CLAIMS)}


def _held(df, device="cpu"):
    checks = lp.check_claims(df, device)
    assert [c.claim for c in checks] == CLAIMS
    assert all(c.criterion for c in checks), "every claim states the rule that decided it"
    assert all("noise" in c.criterion for c in checks), "every criterion names its noise rule"
    return [c.held for c in checks]


def test_the_sensitivity_claim_is_judged_up_to_the_papers_ratio():
    """Issue 43 item 1: the paper judged ratios 0.1-0.9 "not sensitive" and chose 0.9; the claim was judged only up
    to the final models' ratio (0.5 in quick), so a collapse at 0.9 did not count."""
    name = "accuracy is insensitive to the structured pruning ratio up to 0.9"
    at_09 = {c.claim: c for c in lp.check_claims(_claims_frame(accuracy=(80.0, 78.0, 50.0)), "cpu")}[name]
    assert at_09.held is False and "ratio 0.9: +30.50 pp" in at_09.ours and "up to the paper's 0.9" in at_09.criterion
    # every ratio counts, not only the largest: a clear 4-point drop at 0.1 fails
    assert _held(_claims_frame(accuracy=(76.5, 78.0, 78.0)))[I[name]] is False
    # the scan stopped short of 0.9: the note says so
    df = _claims_frame()
    short = df[~((df["experiment"] == "sensitivity") & (df["ratio"] == 0.9))]
    assert "ratios measured up to 0.5 only, not the paper's 0.9" in lp.check_claims(short, "cpu")[I[name]].note


def test_the_sensitivity_claims_are_paired_on_the_same_items():
    """Issue 43 item 2: the same test items scored dense and pruned are compared item by item (accuracy.paired_exact),
    not by two independent binomial intervals. 1,000 items, drops of 0.5-1.0 pp with 0.5% changed the other way:
    paired, the drops' intervals stay under 3 pp (held: at most -0.15 to +2.77 pp); unpaired, they span it
    (inconclusive: -2.51 to +4.51 pp)."""
    names = ["accuracy is insensitive to the structured pruning ratio up to 0.9",
             "no layer alone is sensitive to the structured pruning ratio up to 0.9"]
    small = dict(test_items=1000, accuracy=(80.0, 79.5, 79.5), layers=((80.0, 79.5, 79.5), (80.5, 79.5, 80.0)))
    paired = {c.claim: c for c in lp.check_claims(_claims_frame(**small, changed=0.005), "cpu")}
    unpaired = {c.claim: c for c in lp.check_claims(_claims_frame(**small), "cpu")}
    for name in names:
        assert paired[name].held is True and unpaired[name].held == INCONCLUSIVE, name
        assert "McNemar" in paired[name].criterion and "1000 test items decide a drop of 0.70 pp" in paired[name].note
    # a drop of 7.0 pp on 5,000 items (the embedding at 0.5): paired, clearly more than 3 pp
    big = {c.claim: c for c in lp.check_claims(_claims_frame(test_items=5000, changed=0.01, layers=(
        (80.0, 73.5, 79.0), (80.5, 80.5, 80.5))), "cpu")}[names[1]]
    assert big.held is False and "embedding.weight at 0.5: +7.00 pp" in big.ours
    # no item changed: +- the discordance rate's upper bound (not exactly 0), well inside 3 pp on 1,000 items
    same = _claims_frame(test_items=1000, changed=0.0, accuracy=(80.5,) * 3, layers=((80.5,) * 3, (80.5,) * 3))
    checks = {c.claim: c for c in lp.check_claims(same, "cpu")}
    assert checks[names[0]].held is True and "ratio 0.9: +0.00 pp (95%: -0.4" in checks[names[0]].ours
    assert lp.smallest_effects(same) == lp.decidable(1000)


def test_claims_hold_and_fail_with_the_numbers():
    # LSTM 90-92% > 50%; no GPU; 0 workers fastest at batch 32 only (at 128, 1 worker 0.2 s against 0.5 s in every
    # round); batch 128 fastest (32: 1.0 s); drops up to 2.5 pp < 3 at every ratio to 0.9, each layer alone at most
    # 2.0 pp (the head's 30.5 pp left out); preference not checkable; masks: settled by design, not judged; units:
    # 3.0 / 1.1 s = 2.7x (1.75-4.3x) > 1.34x, faster; their memory settled by construction
    assert _held(_claims_frame()) == [True, None, False, True, True, True, None, None, None, None, True, True, None]
    checks = lp.check_claims(_claims_frame(), "cpu")
    headline = checks[7]
    assert "train + test 19.69 -> 14.73 s (1.34x)" in headline.paper and "49.64 -> 24.33 s (2.04x)" in headline.paper
    assert "21.61 -> 16.60 s (1.30x)" in headline.paper and "28.03 -> 7.73 s" in headline.note
    assert "> 1.34" in headline.criterion and "train epoch + test pass 3.00 -> 3.60 s" in headline.ours
    assert "98.60%" in checks[0].paper and "> 50%" in checks[0].criterion and "most of the time" in checks[0].paper
    assert "Kernel 83.21%, CPU Exec 14.48%" in checks[1].paper and "GPU profile" in checks[1].note
    assert "no ground" in checks[6].note and "l1_unstructured: 79.5%" in checks[6].ours
    # every claim can come out the other way
    # issue 43 item 2: "take up most of the time" is more than half; the V100's 98.6% is no bound (it failed 70-75%)
    assert _held(_claims_frame(lstm_share=(70.0, 72.0, 75.0)))[0] is True
    assert _held(_claims_frame(lstm_share=(30.0, 35.0, 40.0)))[0] is False
    # 1 worker slower at both batch sizes in every round
    assert _held(_claims_frame(epochs=_rounds(1.0, 2.0, 0.4, 0.8)))[2] is True
    # 32 faster than 128 (at 0 workers) in every round
    assert _held(_claims_frame(epochs=_rounds(0.2, 2.0, 0.5, 0.4)))[3] is False
    assert _held(_claims_frame(accuracy=(80.0, 70.0, 78.0)))[4] is False  # 0.5 loses 10.5 pp
    assert _held(_claims_frame(layers=((80.0, 76.0, 80.0), (80.5, 80.5, 80.5))))[5] is False  # 4.5 pp at 0.5
    # masks are not judged whatever the numbers (the implementation settles them); removed units' times are
    assert _held(_claims_frame(masked=(1.0, 0.4, 9.0)))[7:10] == [None, None, None]
    # paired rounds (issue 43): 3.0 / 2.5 s = 1.2x, its rounds' ratios 1.09x and 1.33x: below the paper's 1.34x,
    # decided. A table stored before paired rounds floors both times at x/1.25 to x1.25: 0.77-1.88x, inconclusive; a
    # fall below 1.34x is decided there only under 1.34 / 1.5625 = 0.86x (3.0 / 3.6 s = 0.83x (0.53-1.30x))
    assert _held(_claims_frame(units=(1.7, 0.8, 6.0)))[10] is False
    assert _held(_claims_frame(units=(1.7, 0.8, 6.0), paired=False))[10] == INCONCLUSIVE
    assert _held(_claims_frame(units=(2.4, 1.2, 6.0), paired=False))[10] is False
    # train 2.0 / 0.8 s = 2.5x faster; test pass 1.0 / 2.0 s = 0.5x slower
    assert _held(_claims_frame(units=(0.8, 2.0, 12.0)))[11] is False
    assert _held(_claims_frame(units=(0.8, 2.0, 12.0), paired=False))[11] is False
    # on a GPU the execution summary is judged on the kernel share of the profiled steps (paper 83.21%)
    assert _held(_claims_frame(kernel_share=(85.0, 86.0, 84.0)), "cuda:0")[1] is True
    assert _held(_claims_frame(kernel_share=(50.0, 55.0, 52.0)), "cuda:0")[1] is False


def test_the_masks_and_units_memory_claims_say_they_are_settled_by_design():
    """Issue 32, item 5: masks keep weight_orig and add a mask, so their time and memory cannot fall; the claims say so
    (with the measured difference beside the masks' bytes), quote the paper, and name our ratio beside its 0.9.
    Issue 43 item 3: removing hidden units shrinks every LSTM tensor, so its memory claim is settled by construction
    too (it was judged as support)."""
    checks = lp.check_claims(_claims_frame(masked=(2.4, 1.2, 10.5), units=(0.8, 0.3, 12.0)), "cpu")
    # removing hidden units is ours, beyond the paper (issue 32, item 9): its three claims labelled, the masks' not
    assert sum(c.beyond for c in checks) == 3 and all("removing hidden units" in c.claim for c in checks if c.beyond)
    masks = checks[7:10]
    assert all(c.held is None and "settled by design" in c.note and "not judged (see the note)" in c.criterion
               for c in masks)
    assert "weight_orig" in masks[0].note and "prune.remove" in masks[0].note and "hidden units" in masks[0].note
    assert all("Gain in time and memory" in c.paper and "0.9 pruning ratio" in c.paper for c in masks)
    assert "10.0 -> 10.5 MiB (+0.5)" in masks[2].ours  # the measured difference
    assert all("ratio 0.5 (the paper's 0.9)" in c.note for c in checks[7:])
    assert not any("settled by design" in c.note for c in checks[10:])
    units = checks[12]  # a larger peak (12.0 MiB) would have failed it: not judged whatever the numbers
    assert units.held is None and "settled by construction" in units.note and "4h x (inputs + h)" in units.note
    assert "not judged (see the note)" in units.criterion and "10.0 -> 12.0 MiB" in units.ours
    # at the paper's ratio the note names ours alone
    at_paper = _claims_frame()
    at_paper.loc[(at_paper["experiment"] == "final_models") & (at_paper["ratio"] > 0), "ratio"] = 0.9
    assert all("the paper's 0.9" not in c.note and "ratio 0.9" in c.note for c in lp.check_claims(at_paper, "cpu")[7:])


def test_the_sweep_claims_are_judged_on_paired_rounds():
    """Issue 43 item 4: workers and batch sizes compared round by round (the sign test's interval of the median
    per-round ratio), not on the ranges of unpaired times floored at x/1.25."""
    workers, batch = "0 DataLoader workers give the fastest training epoch", "batch size 128 gives the fastest " \
        "training epoch"
    # 1 worker 3% slower and batch 32 3% slower than 128 in each of 8 rounds, whose load swings +-20%: decided (the
    # old rule's ranges of 0.8-1.2 s overlapped: inconclusive)
    swing = tuple(1 + 0.2 * (-1) ** r for r in range(8))
    clear = _claims_frame(epochs=tuple(tuple(m * f for f in swing) for m in (1.03, 1.061, 1.0, 1.03)))
    checks = {c.claim: c for c in lp.check_claims(clear, "cpu")}
    assert checks[workers].held is True and checks[batch].held is True
    assert "8 paired rounds" in checks[workers].ours and "batch 32, 1 workers: 1.03x" in checks[workers].ours
    assert "paired" in checks[batch].criterion and "both at 0 workers" in checks[batch].criterion
    # identical work: the per-round ratios scatter around 1 (half the rounds each way): inconclusive
    noise = tuple(1 + 0.02 * (-1) ** (r // 2) for r in range(8))
    wobbled = tuple(a * b for a, b in zip(swing, noise))
    same = _claims_frame(epochs=(swing, wobbled, wobbled, tuple(a * b for a, b in zip(wobbled, noise))))
    checks = {c.claim: c for c in lp.check_claims(same, "cpu")}
    assert checks[workers].held == INCONCLUSIVE and checks[batch].held == INCONCLUSIVE
    # one round: no interval
    one = _claims_frame(epochs=_rounds(1.0, 2.0, 0.5, 0.4, n=1))
    assert [c.held for c in lp.check_claims(one, "cpu")[2:4]] == [None, None]
    assert "one timing round" in lp.check_claims(one, "cpu")[2].note


def test_verdicts_within_noise_are_inconclusive_and_clear_ones_decided():
    """Issue 22: 0 workers "went no -> yes between two runs". Overlapping rounds say inconclusive; separated ones
    decide; a re-run can move a verdict only to or from inconclusive."""
    overlap = _held(_claims_frame(
        lstm_share=(45.0, 50.0, 55.0),  # spans 50%
        masked=(1.1, 0.4, 9.0), spread=0.15,
        units=(1.8, 0.45, 6.0)))  # 3.0 / 2.25 = 1.33x, its rounds' ratios 0.99x and 1.8x: span 1.34x; train spans 1
    assert overlap[0] == INCONCLUSIVE
    assert overlap[10] == overlap[11] == INCONCLUSIVE
    clear = _held(_claims_frame(epochs=_rounds(0.3, 2.0, 0.5, 0.9), spread=0.01))
    assert clear[2] is True and clear[3] is False and clear[10] is True
    # one timing round of the profile and the final models: no range, nothing timed there is decided
    one = _held(_claims_frame(lstm_share=(90.0,), rounds=1, spread=0.0, final_rounds=1))
    assert [one[i] for i in (0, 7, 8, 10, 11)] == [None] * 5
    assert "one timing round" in lp.check_claims(_claims_frame(final_rounds=1, spread=0.0), "cpu")[10].note
    assert "one timing round" in lp.check_claims(_claims_frame(rounds=1, spread=0.0, paired=False), "cpu")[10].note


def test_the_best_batch_size_claim_says_when_it_cannot_be_judged():
    df = _claims_frame()
    only_32 = df[~((df["experiment"] == "loader_sweep") & (df["batch_size"] == 128))]
    claim = lp.check_claims(only_32, "cpu")[3]
    assert claim.held is None and "not both measured" in claim.note and claim.criterion
    assert "largest batch size measured" in lp.check_claims(df, "cpu")[3].note  # 128 is the largest here


def test_rounds_repeat_the_loader_sweep_and_the_profile(tmp_path):
    """min_rounds paired rounds of the whole DataLoader grid (one store per round), timing_rounds of the profile;
    each sensitivity row counts the items only dense or only the pruned model gets right."""
    cfg = lp.configure("quick", **{**TINY, "timing_rounds": 2, "min_rounds": 2, "max_rounds": 2})
    parts = studies.tables(lp.measure(cfg, tmp_path, progress=False))
    ok = parts["loader_sweep"][parts["loader_sweep"]["status"] == "ok"]
    assert sorted(ok["round"]) == [0, 1] and list(ok["num_workers"]) == [0, 0] and "confidence" in ok
    assert len(list((tmp_path / "stores").glob("sweep_loader_sweep_*.csv"))) == 2
    rounds = parts["profile_rounds"]
    assert list(rounds["round"]) == [0, 1] and rounds["lstm_share_pct"].between(0, 100).all()
    assert rounds["kernel_share_pct"].isna().all(), "no GPU kernels on a CPU"
    sens = parts["sensitivity"]
    changed = sens["correct_only_dense"] - sens["correct_only_pruned"]
    assert ((changed / sens["test_items"] * 100 - (sens["dense_accuracy_pct"] - sens["accuracy_pct"])).abs()
            < 1e-6).all(), "the discordant counts make up the accuracy difference"
    by = lp.check_claims(studies.combine(**parts), "cpu")
    assert by[0].held in (True, False, INCONCLUSIVE) and "2 profiles" in by[0].ours
    assert by[1].held is None


def test_configure_names_the_bad_parameter():
    for bad, match in ((dict(methods=["magnitude"]), "valid methods"), (dict(ratios=[1.5]), r"ratios=1.5 is not valid; valid: a finite number in \(0, 1\)"),
                       (dict(batch_sizes=[0]), "batch_sizes"), (dict(chosen_ratio=0.99), "hidden units"),
                       (dict(sweep_fraction=0), "sweep_fraction"), (dict(num_workers=[-1]), "num_workers"),
                       (dict(device="tpu"), "device"), (dict(synthetic="yes"), "synthetic")):
        with pytest.raises(ValueError, match=match):
            lp.configure("quick", **{**TINY, **bad})
    with pytest.raises(ValueError, match="valid parameters"):
        lp.configure("quick", hiden_size=3)


def test_configure_rejects_values_that_would_train_to_garbage_before_any_work():
    # 06 -p lr inf trained 27 s to chance accuracy, wrote it to claims.csv, then failed; -p methods '[]' the same
    for bad, match in ((dict(lr=float("inf")), r"lr=inf is not valid; valid: a finite number in \(0, 1\]"),
                       (dict(lr=float("nan")), "lr=nan is not valid"), (dict(lr=True), "lr=True is not valid"),
                       (dict(lr=5.0), r"lr=5.0 is not valid; valid: a finite number in \(0, 1\]"),
                       (dict(methods="[]"), "methods is empty; valid: a list of"), (dict(methods=[]), "methods is empty"),
                       (dict(ratios=[]), "ratios is empty"), (dict(ratios=[float("nan")]), "ratios=nan"),
                       (dict(sweep_fraction=float("inf")), "sweep_fraction=inf"), (dict(epochs=True), "epochs=True"),
                       (dict(batch_size=10**6), r"batch_size=1000000 must be an integer >= 1 and <= 65536"),
                       (dict(hidden_size=2.0), "hidden_size=2.0 must be an integer"),
                       (dict(chosen_ratio=float("nan")), "chosen_ratio=nan"),
                       (dict(threads=10**4), r"threads=10000 must be an integer >= 1 and <= \d+ \(the CPU cores"),
                       (dict(num_workers=[0, 200]), "num_workers: 200 is not valid; valid: integers >= 0 and <= 128")):
        with pytest.raises(ValueError, match=match):
            lp.configure("quick", **{**TINY, **bad})


def test_training_keeps_one_adam_optimizer_across_epochs(monkeypatch):
    """train_baseline used to call fit once per epoch, and fit made a new Adam each time: its moment estimates were
    reset every epoch. One optimizer for the whole run, one history row per epoch."""
    made = []
    real_adam = torch.optim.Adam

    def counting_adam(*args, **kwargs):
        made.append(1)
        return real_adam(*args, **kwargs)

    monkeypatch.setattr(torch.optim, "Adam", counting_adam)
    three_epochs = lp.configure("quick", **{**TINY, "epochs": 3})
    _, history = lp.train_baseline(three_epochs, *lp.datasets(three_epochs))
    assert len(made) == 1
    assert list(history["epoch"]) == [1, 2, 3] and history["test_accuracy_pct"].notna().all()


def _sweep_rows(df):
    rows = df[df["experiment"].isin(SWEEPS) & (df["status"] == "ok")]
    return rows[["experiment", "finished_utc", "point_time_s", "train_items"]].reset_index(drop=True)


def test_a_run_with_other_settings_never_returns_stored_rows(tmp_path):
    """Same store folder, another model size: measured anew, only this run's rows come back; the first settings
    again: resumed from the store, nothing measured; another data fraction: measured anew."""
    a_cfg = lp.configure("quick", **TINY)
    a = lp.measure(a_cfg, tmp_path, progress=False)
    start_b = pd.Timestamp.now(tz="UTC").floor("s")
    b = lp.measure(lp.configure("quick", **{**TINY, "hidden_size": 12}), tmp_path, progress=False)
    assert len(_sweep_rows(b)) == len(_sweep_rows(a)) > 0
    assert (pd.to_datetime(_sweep_rows(b)["finished_utc"]) >= start_b).all(), "measured anew"
    for name in SWEEPS:
        assert len(list((tmp_path / "stores").glob(f"sweep_{name}_*.csv"))) == 2  # one store per set of settings
    again = lp.measure(a_cfg, tmp_path, progress=False)  # same settings: resumed, not re-measured
    pd.testing.assert_frame_equal(_sweep_rows(again), _sweep_rows(a))

    quarter = _sweep_rows(lp.measure(lp.configure("quick", **{**TINY, "sweep_fraction": 0.25}), tmp_path,
                                     progress=False))
    loaders = quarter[quarter["experiment"] == "loader_sweep"]
    assert list(loaders["train_items"]) == [32] and (pd.to_datetime(loaders["finished_utc"]) >= start_b).all()
    # every setting that is not a grid axis keys every store (over-inclusive is safe): the scan is measured anew too
    sensitivity = quarter[quarter["experiment"] == "sensitivity"]
    assert len(sensitivity) == (_sweep_rows(a)["experiment"] == "sensitivity").sum()
    assert (pd.to_datetime(sensitivity["finished_utc"]) >= start_b).all()


def test_every_measured_row_says_where_its_data_came_from(df):
    """(Was an assert of notebook 06's last cell.) Training, profile and final rows have no status."""
    measured = df[df["status"].isna() | (df["status"] == "ok")]
    assert set(measured["data_source"]) == {"synthetic"}


# The quick preset with fewer timing rounds, timed batches and DataLoader-sweep data: every code path (two rounds
# still judge the noise; every batch size x num_workers point, forked workers too; every pruning method, scope and
# ratio; every final model), in half the time: under the harness 56 s against the preset's 107 s (two busy cores;
# the harness itself adds a few per cent to a pass).
GPU_PASS = dict(timing_rounds=2, repeats=2, sweep_fraction=0.1)


@pytest.mark.slow
def test_a_quick_pass_on_a_gpu_follows_cudas_placement_rules():
    """Issue 30: 06 could not run on a GPU (masks and global structured pruning's row widths on the host; the shrunk
    LSTM on the host in float32). One whole quick pass with device "cpu:0" under CUDA's placement rules
    (tests/fakedevice.py, cpu:0 playing the GPU): training, profile, DataLoader sweep, every pruning method and
    scope, the final models, claims, figures and the generic checks."""
    with fakedevice.cuda_rules():
        cfg = lp.configure("quick", device="cpu:0", **GPU_PASS)
        df = lp.measure(cfg, None, progress=False)
        errors = df[df["status"] == "error"]
        assert errors.empty, errors[["experiment", "scope", "method", "ratio", "error"]].to_string()
        parts = studies.tables(df)
        assert set(parts["final_models"]["device"]) == {"cpu:0"} == set(parts["profile_rounds"]["device"])
        sens = parts["sensitivity"]
        assert set(zip(sens["method"], sens["scope"])) >= {(m, s) for m in prune.METHODS
                                                           for s in ("layer", "all_layers", "global")}
        assert [c.claim for c in lp.check_claims(df, cfg.device)] == CLAIMS
        for fig in lp.figures(df).values():
            plotting.plt.close(fig)
        assert "results checked" in studies.check_results(df, cfg)
