import time

import pytest
import torch

from cnnlab import data, train
from margins import check


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    start = time.perf_counter()
    model, history = train.train("resnet20", "digits", recipe="quick", root=root, progress=False)
    return root, model, history, time.perf_counter() - start


def test_resnet20_learns_digits_above_90_percent(trained):
    _, model, history, _ = trained
    # The quick recipe (warm-up, 4 epochs) measured 97.2-99.7% over seeds 0-3 on the AVX-512 and AVX2 paths; 90%
    # catches a broken model, loader or schedule (chance is 10%) with 7 points to spare on every path seen.
    check("ResNet-20 quick recipe, digits test accuracy (%)", history["test_accuracy_pct"].iloc[-1], ">", 90)
    assert (history["data_source"] == "real").all()
    assert list(history.columns[:3]) == ["epoch", "lr", "train_loss"]
    test = data.make_loader(data.load("digits", "test"), 256)
    assert train.evaluate(model, test)["accuracy_pct"] == pytest.approx(history["test_accuracy_pct"].iloc[-1])


def test_second_call_loads_the_checkpoint(trained):
    root, model, history, first_s = trained
    start = time.perf_counter()
    again, history2 = train.train("resnet20", "digits", recipe="quick", root=root, progress=False)
    assert time.perf_counter() - start < first_s / 3
    for a, b in zip(model.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)
    assert history2.equals(history)
    assert len(list((root / "checkpoints").glob("*.pt"))) == 1


def test_checkpoint_key_depends_on_recipe_and_source():
    a = train.checkpoint_path("resnet20", "cifar10", train.RECIPES["quick"], data_source="real")
    b = train.checkpoint_path("resnet20", "cifar10", train.RECIPES["standard"], data_source="real")
    c = train.checkpoint_path("resnet20", "cifar10", train.RECIPES["quick"], data_source="synthetic")
    assert len({a, b, c}) == 3


def test_warmup_ramps_the_learning_rate_then_follows_the_schedule():
    recipe = train.Recipe(epochs=3, lr=0.1, schedule="cosine", warmup_epochs=1)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=recipe.lr)
    scheduler = train._scheduler(optimizer, recipe, steps_per_epoch=10)
    lrs = []
    for _ in range(30):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == pytest.approx(0.01) and lrs[10] == pytest.approx(0.1)  # lr/10 -> lr over the first epoch
    assert all(a < b for a, b in zip(lrs[:10], lrs[1:11]))
    assert all(a > b for a, b in zip(lrs[10:29], lrs[11:30])) and lrs[29] < 0.01  # then cosine to ~0
    with pytest.raises(ValueError, match="warmup_epochs"):
        train.Recipe(epochs=2, warmup_epochs=2)


def test_evaluate_in_reduced_precision_and_bad_recipe():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 10))
    loader = data.make_loader(data.load("digits", "test"), 128)
    fp32 = train.evaluate(model, loader)
    bf16 = train.evaluate(model, loader, autocast=torch.bfloat16)
    assert fp32["num_examples"] == bf16["num_examples"] == 360
    # bf16 keeps 8 mantissa bits, so autocast moves the mean loss a little, never by 0.05 (a loss not computed in
    # fp32, or inputs not normalised alike, would); a loss that does not move at all means autocast did not run.
    check("bf16 vs fp32 mean loss |diff|", abs(fp32["loss"] - bf16["loss"]), "<", 0.05)
    assert fp32["loss"] != bf16["loss"]
    with pytest.raises(ValueError, match="valid recipes"):
        train.train("resnet20", "digits", recipe="long")
    with pytest.raises(ValueError, match="valid schedules"):
        train.Recipe(schedule="linear")
