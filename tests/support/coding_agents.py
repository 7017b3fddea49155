"""Real coding agents for the end-to-end tests: installed from their registries (npm for
Claude Code, Codex CLI and opencode; PyPI for aider) into a cache folder, and run headless
in an empty git repo against a ``localspec serve`` started as a user would start it.

The versions are pinned: an agent's dialect is what its release sends (the requests of
these releases are kept in tests/data/agents/)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import platformdirs

NPM_AGENTS = {
    "@anthropic-ai/claude-code": "2.1.332",
    "@openai/codex": "0.171.0",
    "opencode-ai": "1.18.33",
}
AIDER = "aider-chat==0.86.2"
TASK = "create hello.py that prints hello"
QUIET = {  # no telemetry, update checks or other traffic to the vendors (unreachable here anyway)
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
}


def agents_dir() -> Path:
    """``$LOCALSPEC_TEST_AGENTS`` or the user cache's ``localspec/test-agents``."""
    return Path(
        os.environ.get("LOCALSPEC_TEST_AGENTS")
        or Path(platformdirs.user_cache_dir("localspec")) / "test-agents"
    )


def _installed_npm_version(root: Path, package: str) -> str | None:
    try:
        return json.loads((root / "node_modules" / package / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def install_npm_agents() -> Path:
    """The folder of the agents' executables (``node_modules/.bin``), installed with npm
    the first time (about a minute).  Raises CalledProcessError with npm's output."""
    root = agents_dir()
    root.mkdir(parents=True, exist_ok=True)
    wanted = [f"{p}@{v}" for p, v in NPM_AGENTS.items() if _installed_npm_version(root, p) != v]
    if wanted:
        npm = shutil.which("npm")
        assert npm, "npm is needed to install the coding agents (node and npm on PATH)"
        subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(root),
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                *wanted,
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=900,
        )
    return root / "node_modules" / ".bin"


def install_aider() -> Path:
    """aider's executable, in a virtual env of its own under :func:`agents_dir`."""
    venv = agents_dir() / "aider-venv"
    aider = venv / "bin" / "aider"
    if not aider.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", AIDER],
            check=True,
            capture_output=True,
            text=True,
            timeout=1800,
        )
    return aider


@dataclass
class AgentRun:
    """One headless session: its exit status, output, and the repo it worked in."""

    returncode: int
    output: str
    repo: Path
    seconds: float

    def file(self, name: str) -> str | None:
        path = self.repo / name
        return path.read_text() if path.exists() else None


def run_agent(command: list[str], env: dict[str, str], workdir: Path, timeout_s: float) -> AgentRun:
    """Run ``command`` in ``workdir/repo`` (a fresh git repo) with ``HOME=workdir/home``."""
    repo, home = workdir / "repo", workdir / "home"
    repo.mkdir(parents=True)
    home.mkdir(parents=True, exist_ok=True)  # a config may be written there first
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "config", "user.email", "test@localhost"], cwd=repo, check=True)
    subprocess.run(["git", "config", "user.name", "test"], cwd=repo, check=True)
    full_env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "dumb", **QUIET, **env}
    started = time.monotonic()
    try:
        done = subprocess.run(
            command,
            cwd=repo,
            env=full_env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        rc, out = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out = -9, f"timed out after {timeout_s:.0f} s\n{exc.stdout or ''}{exc.stderr or ''}"
    return AgentRun(
        rc,
        out if isinstance(out, str) else out.decode(errors="replace"),
        repo,
        time.monotonic() - started,
    )


def codex_config(home: Path, base_url: str) -> None:
    """What docs/agents/codex.md tells a user to put in ``~/.codex/config.toml``."""
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(
        'model = "local"\nmodel_provider = "localspec"\n\n[model_providers.localspec]\nname = "localspec"\n'
        f'base_url = "{base_url}/v1"\nwire_api = "responses"\nenv_key = "LOCALSPEC_API_KEY"\n'
    )


def opencode_config(home: Path, base_url: str) -> None:
    """What docs/agents/opencode.md tells a user to put in ``~/.config/opencode/opencode.json``."""
    folder = home / ".config" / "opencode"
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "provider": {
            "localspec": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "localspec",
                "options": {"baseURL": f"{base_url}/v1", "apiKey": "none"},
                "models": {"local": {"name": "local"}},
            }
        },
        "model": "localspec/local",
    }
    (folder / "opencode.json").write_text(json.dumps(config, indent=2))
