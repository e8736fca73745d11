"""cnnlab.plotting.lstm_pruning: study 06's figures, drawn below the studies (from measure's frame alone)."""

import ast
from pathlib import Path

from cnnlab.plotting import lstm_pruning as drawing
from cnnlab.studies import lstm_pruning


def test_the_study_draws_with_the_plotting_module_which_imports_no_study():
    assert lstm_pruning.figures is drawing.figures
    tree = ast.parse(Path(drawing.__file__).read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in imported if m.startswith("cnnlab.studies")]
