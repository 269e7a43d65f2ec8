"""``envfleet train`` / ``eval``: a bad value, a missing device or package, an unwritable path
or a broken checkpoint is one line, ``envfleet <command>: error: ...``, exit status 2; never a
traceback."""

from __future__ import annotations

import importlib.util

import gymnasium
import pytest
import torch

from envfleet.cli import main
from envfleet.train import checkpoint, evaluation, ppo
from tests.unwritable import FILE_KINDS, unwritable_file

TINY = ["--total-steps", "64", "--num-envs", "4", "--num-steps", "16", "--eval-every", "0",
        "--eval-episodes", "2", "--quiet"]


def _error(capsys, command: str = "train") -> str:
    err = capsys.readouterr().err  # argparse's errors come after its usage lines
    assert err.strip().splitlines()[-1].startswith(f"envfleet {command}: error: "), err
    assert "Traceback" not in err, err
    return err


# --- train: seeds, opponent, device, missing packages ------------------------------------------


def test_a_seed_past_uint64_is_refused_when_parsed(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "CartPole-v1", "--seed", str(2**64), *TINY])
    assert exc.value.code == 2
    assert "argument --seed: must be below 2**64" in _error(capsys)


def test_a_seed_whose_envs_pass_uint64_is_refused_before_training(capsys):
    assert main(["train", "CartPole-v1", "--seed", str(2**64 - 1), *TINY]) == 2
    err = _error(capsys)
    assert f"--seed {2**64 - 1} is too large" in err and f"{2**64 - 10_002}" in err


def test_an_unknown_chess_opponent_is_a_clean_error(capsys):
    assert main(["train", "Chess-v0", "--opponent", "nope", *TINY]) == 2
    err = _error(capsys)
    assert "Chess-v0" in err and "opponent" in err and "'nope'" in err


@pytest.mark.skipif(torch.cuda.device_count() > 7, reason="this machine has a cuda:7")
def test_a_missing_device_is_named_with_the_ones_there_are(capsys):
    assert main(["train", "CartPole-v1", "--device", "cuda:7", *TINY]) == 2
    err = _error(capsys)
    assert "--device cuda:7 is not available here; available: cpu" in err


def test_an_unknown_device_is_a_clean_error(capsys):
    assert main(["train", "CartPole-v1", "--device", "warp9", *TINY]) == 2
    assert "--device 'warp9' is not a torch device" in _error(capsys)


@pytest.fixture
def missing_package_id():
    """A Gymnasium id whose entry point imports a package that is not installed."""
    env_id = "EnvfleetMissingPackage-v0"
    gymnasium.register(env_id, entry_point="envfleet_no_such_package.envs:Env")
    yield env_id
    del gymnasium.registry[env_id]


@pytest.mark.parametrize("backend", ["auto", "serial"])
def test_an_executor_id_whose_package_is_missing_names_it(missing_package_id, backend, capsys):
    assert main(["train", missing_package_id, "--backend", backend, *TINY]) == 2
    err = _error(capsys)
    assert "needs the module 'envfleet_no_such_package', which is not installed" in err
    assert main(["eval", missing_package_id, "--load", "p.pt"]) == 2
    assert "'envfleet_no_such_package'" in _error(capsys, "eval")


@pytest.mark.skipif(importlib.util.find_spec("Box2D") is not None, reason="Box2D is installed")
def test_car_racing_without_box2d_names_the_extra(capsys):
    assert main(["train", "CarRacing-v3", *TINY]) == 2
    err = _error(capsys)
    assert "CarRacing-v3 needs a package that is not installed" in err
    assert "gymnasium[box2d]" in err


# --- eval: unwritable outputs -------------------------------------------------------------------


@pytest.fixture
def policy(tmp_path):
    """A CartPole policy as train --save writes it (untrained: built, not trained)."""
    import envfleet

    env = envfleet.make("CartPole-v1", 1)
    path = tmp_path / "policy.pt"
    checkpoint.save(ppo.Agent(env.single_observation_space, env.single_action_space),
             ppo.Args(env_id="CartPole-v1"), str(path))
    env.close()
    return path


@pytest.mark.parametrize("kind", FILE_KINDS)
@pytest.mark.parametrize(("option", "name"), [("--json", "eval.json"), ("--video", "ep.gif")])
def test_eval_refuses_an_unwritable_output_before_playing(option, name, kind, policy, tmp_path,
                                                          monkeypatch, capsys):
    def no_play(*args, **kwargs):
        raise AssertionError("the policy was played although its output cannot be written")

    monkeypatch.setattr(evaluation, "evaluate", no_play)
    path = unwritable_file(tmp_path, kind, name)
    assert main(["eval", "CartPole-v1", "--load", str(policy), "--episodes", "2", option,
                 str(path)]) == 2
    assert f"{option} {path}: " in _error(capsys, "eval")


# --- checkpoints --------------------------------------------------------------------------------


def _tampered(policy, tmp_path, **changes):
    saved = torch.load(policy, weights_only=True)
    for key, value in changes.items():
        if key == "state_dict":
            saved["state_dict"] = value
        else:
            saved["args"][key] = value
    path = tmp_path / "tampered.pt"
    torch.save(saved, path)
    return path


def test_an_empty_checkpoint_is_refused(tmp_path, capsys):
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    assert main(["eval", "CartPole-v1", "--load", str(empty)]) == 2
    assert f"{empty} is empty, not a policy saved by envfleet train --save" in \
        _error(capsys, "eval")


def test_a_tampered_activation_is_refused_and_quoted_briefly(policy, tmp_path, capsys):
    path = _tampered(policy, tmp_path, activation="gelu" + "x" * 100_000)
    assert main(["eval", "CartPole-v1", "--load", str(path)]) == 2
    err = _error(capsys, "eval")
    assert "is not a policy saved by envfleet train --save (activation 'gelu" in err
    assert "is not one of 'tanh', 'relu'" in err and len(err) < 400


@pytest.mark.parametrize("case", ["widths", "chain", "not ints", "norm_obs", "env_id"])
def test_crafted_architecture_fields_are_refused_before_anything_is_built(
        case, policy, tmp_path, monkeypatch, capsys):
    """hidden_sizes that the weights do not have (160 GB of layers, say) are refused before any
    layer is built (a guard fails the test instead of allocating them)."""
    linear = torch.nn.Linear

    def guarded_linear(a: int, b: int, *args, **kwargs):
        assert a * b <= 10**8, f"about to allocate a {a} x {b} layer"
        return linear(a, b, *args, **kwargs)

    monkeypatch.setattr(torch.nn, "Linear", guarded_linear)
    weights = torch.load(policy, weights_only=True)["state_dict"]
    if case == "widths":  # 200k x 200k floats: 160 GB
        path = _tampered(policy, tmp_path, hidden_sizes=[200_000, 200_000])
    elif case == "chain":  # the output widths match, but the layers would not fit together
        small = {k: v for k, v in weights.items() if not k.startswith("critic.")}
        small.update({"critic.0.weight": torch.zeros(20_000, 4), "critic.0.bias":
                      torch.zeros(20_000), "critic.2.weight": torch.zeros(20_000, 1),
                      "critic.2.bias": torch.zeros(20_000), "critic.4.weight": torch.zeros(1, 1),
                      "critic.4.bias": torch.zeros(1)})
        path = _tampered(policy, tmp_path, hidden_sizes=[20_000, 20_000], state_dict=small)
    elif case == "not ints":
        path = _tampered(policy, tmp_path, hidden_sizes=[64.0, "64"])
    elif case == "norm_obs":
        path = _tampered(policy, tmp_path, norm_obs="yes")
    else:
        path = _tampered(policy, tmp_path, env_id=["CartPole-v1"])
    assert main(["eval", "CartPole-v1", "--load", str(path), "--episodes", "2"]) == 2
    err = _error(capsys, "eval")
    assert "is not a policy saved by envfleet train --save" in err
    assert {"widths": "do not match its critic's layers", "chain": "do not match its critic's",
            "not ints": "is not a list of positive ints", "norm_obs": "norm_obs 'yes'",
            "env_id": "env_id ['CartPole-v1'] is not a string"}[case] in err
