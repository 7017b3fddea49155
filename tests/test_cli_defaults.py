"""Every subcommand's defaults pass its own option checks, without loading a model: the
README's `localspec serve` (no flags) once failed at start because `-n` defaulted to None
and was checked as max_tokens=None."""

from __future__ import annotations

import argparse
import importlib.util

import pytest

from localspec.cli import commands, loading


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = commands._parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _minimal_argv(name: str, sub: argparse.ArgumentParser) -> list[str]:
    """The subcommand with a placeholder for each required positional argument."""
    positionals = [
        a
        for a in sub._actions
        if not a.option_strings
        and a.nargs != argparse.PARSER
        and a.required
        and not isinstance(a, argparse._SubParsersAction)
    ]
    return [name] + ["x"] * len(positionals)


def _matplotlib_present(monkeypatch, present: bool) -> None:
    """`localspec bench` (not --smoke) refuses to start without matplotlib, which the test
    extra does not install; the defaults are judged as if it were there (or surely not)."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name == "matplotlib":
            return real("json") if present else None
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_each_subcommand_s_defaults_pass_its_checks(name, monkeypatch):
    _matplotlib_present(monkeypatch, True)
    argv = _minimal_argv(name, _subcommands()[name])
    args = commands._parser().parse_args(argv)
    commands.check_args(args)  # raises InvalidOptionError for an invalid default


def test_the_subcommands_are_the_ones_the_readme_shows():
    assert set(_subcommands()) == {
        "run",
        "chat",
        "serve",
        "bench",
        "pull",
        "models",
        "doctor",
        "gui",
    }


def test_serve_keeps_an_unset_max_tokens_for_the_requests_to_decide():
    args = commands._parser().parse_args(["serve"])
    assert args.max_tokens is None
    assert "max_tokens" not in {
        k for k, v in loading.generation_options(args).items() if v is not None
    }


@pytest.mark.parametrize(
    "argv, message",
    [
        (["serve", "-n", "0"], "max_tokens"),
        (["serve", "--port", "0"], "--port"),
        (["serve", "--parallel", "0"], "--parallel"),
        (["serve", "--cache-ram", "-1"], "--cache-ram"),
        (["serve", "--draft", "prediction"], "per request"),
        (["run", "hi", "--temp", "-1"], "temperature"),
        (["bench", "--reps", "0"], "--reps"),
    ],
)
def test_a_bad_option_is_refused_before_loading(argv, message, capsys):
    assert commands.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def test_bench_without_matplotlib_says_how_to_get_it_before_any_work(capsys, monkeypatch):
    _matplotlib_present(monkeypatch, False)
    assert commands.main(["bench", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "pip install -e '.[bench]'" in err and "Traceback" not in err and err.count("\n") == 1
