"""Docs that run (issue 31): every fenced Python block of README.md and docs/*.md, and every ``lightning-edge``
line of their ```bash/```sh/```console blocks, executed as written, so the pages cannot drift from the code.

How a page marks its blocks (an HTML comment on the line(s) just before the fence, invisible when rendered):

- ``<!-- continues -->``: the block goes on from the block before it on the same page (same namespace, same
  folder); a reader pastes both. Without it every block is self-contained.
- ``<!-- skip: REASON -->``: not run here (needs a Jetson, a GPU, a network); the test is skipped with REASON.
- ``<!-- slow -->``: runs only in the slow suite (``pytest -m slow``): a full demo, a benchmark.

Each block (with its continuations) runs in this process, in a fresh temporary folder, with a fresh namespace, a
profile store and a state folder of its own, under a time limit (``TIME_LIMIT_S``; ``SLOW_TIME_LIMIT_S`` for
slow ones). A ``lightning-edge ARGS`` line runs ``lightning_edge.cli.main(ARGS)``, the entry point of the
``lightning-edge`` script (pyproject ``[project.scripts]``), and must return 0. Lines of a ```console block run
only when they start with ``$ ``; anything else there is output. Other commands (``pip``, ``tensorboard``) are
not run.

A second test keeps the repository self-contained: no file names a path outside it (a shared folder, a
machine's absolute path, a design document that is not in it).
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TIME_LIMIT_S = 60
SLOW_TIME_LIMIT_S = 900

PYTHON = {"python", "py", "python3"}
SHELL = {"bash", "sh", "shell", "console"}
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+|~~~+)\s*(?P<info>[^`\s]*)")
_MARKER = re.compile(r"^\s*<!--\s*(?P<body>.*?)\s*-->\s*$")


@dataclass
class Step:
    kind: str  # "python" or "cli"
    line: int  # 1-based line of the fence
    code: str = ""
    argv: list[str] = field(default_factory=list)


@dataclass
class Group:
    page: Path
    line: int
    steps: list[Step] = field(default_factory=list)
    skip: str | None = None
    slow: bool = False

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def _markers(lines: list[str], fence_index: int) -> list[str]:
    """The HTML-comment markers on the lines just above the fence (blank lines between them allowed)."""
    found: list[str] = []
    i = fence_index - 1
    while i >= 0:
        text = lines[i]
        if not text.strip():
            i -= 1
            continue
        m = _MARKER.match(text)
        if not m:
            break
        found.append(m.group("body"))
        i -= 1
    return found


def _cli_lines(body: str, console: bool) -> list[list[str]]:
    """The ``lightning-edge`` invocations of a shell block, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in body.splitlines():
        if console:
            if not pending:
                if not raw.startswith("$ "):
                    continue
                raw = raw[2:]
        text = pending + raw
        if text.rstrip().endswith("\\"):
            pending = text.rstrip()[:-1] + " "
            continue
        pending = ""
        logical.append(text)
    out = []
    for text in logical:
        words = shlex.split(text, comments=True)
        if words and words[0] == "lightning-edge":
            out.append(words[1:])
    return out


def collect(page: Path) -> list[Group]:
    lines = page.read_text(encoding="utf-8").splitlines()
    groups: list[Group] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group("fence"), m.group("info").lower()
        start = i
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        indent = len(m.group("indent"))
        body = "\n".join(x[indent:] if x[:indent].isspace() else x for x in lines[start + 1:j])
        body = textwrap.dedent(body)
        i = j + 1
        if lang not in PYTHON | SHELL:
            continue
        markers = _markers(lines, start)
        if lang in PYTHON:
            steps = [Step("python", start + 1, code=body)]
        else:
            steps = [Step("cli", start + 1, argv=a) for a in _cli_lines(body, console=lang == "console")]
            if not steps:
                continue
        skip = next((mk.split(":", 1)[1].strip() or "marked skip" for mk in markers if mk.startswith("skip")),
                    None)
        if any(mk == "continues" for mk in markers):
            if not groups:
                raise ValueError(f"{page}:{start + 1}: 'continues' but no block before it")
            group = groups[-1]
            group.steps.extend(steps)
            group.skip = group.skip or skip
            group.slow = group.slow or any(mk.startswith("slow") for mk in markers)
            continue
        groups.append(Group(page, start + 1, steps, skip=skip, slow=any(mk.startswith("slow") for mk in markers)))
    return groups


def _all_groups() -> list[Group]:
    return [g for page in PAGES for g in collect(page)]


class _TimeLimit(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: int, what: str):
    def _raise(signum, frame):
        raise _TimeLimit(f"{what} ran past its time limit of {seconds} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_group(group: Group, folder: Path, limit_s: int) -> None:
    """Run a group's steps in order in ``folder``; raise AssertionError naming the block that failed."""
    from lightning_edge.cli import main

    namespace: dict = {"__name__": "__main__"}
    with _time_limit(limit_s, group.id):
        for step in group.steps:
            where = f"{group.page.relative_to(REPO)}:{step.line}"
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                    if step.kind == "python":
                        # blank lines up to the fence so that a traceback's line numbers are the page's
                        code = compile("\n" * step.line + step.code, where, "exec")
                        exec(code, namespace)
                    else:
                        try:
                            rc = main(step.argv)
                        except SystemExit as e:  # argparse errors
                            rc = e.code
                        if rc not in (0, None):
                            raise AssertionError(f"lightning-edge {shlex.join(step.argv)} returned {rc}")
            except _TimeLimit:
                raise
            except BaseException as e:  # noqa: BLE001 - report every failure with the block it came from
                tb = traceback.format_exc(limit=-8)
                raise AssertionError(
                    f"the block at {where} failed: {type(e).__name__}: {e}\n{tb}\n"
                    f"--- its output, stdout and stderr (last 3000 characters) ---\n{out.getvalue()[-3000:]}") from None
            sys.stdout.write(out.getvalue())


def _params(slow: bool):
    out = []
    for g in _all_groups():
        marks = []
        if g.skip:
            marks.append(pytest.mark.skip(reason=g.skip))
        elif g.slow != slow:
            marks.append(pytest.mark.skip(reason="slow block: run by test_slow_doc_block (pytest -m slow)"
                                          if g.slow else "fast block: run by test_doc_block"))
        out.append(pytest.param(g, id=g.id, marks=marks))
    return out


@pytest.fixture
def _doc_env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LIGHTNING_EDGE_PROFILE_STORE", f"sqlite:///{tmp_path / 'profiles.sqlite3'}")
    monkeypatch.setenv("LIGHTNING_EDGE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setattr(sys, "argv", ["docs-block"])
    return tmp_path


@pytest.mark.parametrize("group", _params(slow=False))
def test_doc_block(group: Group, _doc_env):
    run_group(group, _doc_env, TIME_LIMIT_S)


@pytest.mark.slow
@pytest.mark.parametrize("group", _params(slow=True))
def test_slow_doc_block(group: Group, _doc_env):
    run_group(group, _doc_env, SLOW_TIME_LIMIT_S)


def test_every_page_has_blocks_the_test_sees():
    """The collector finds the blocks (a regression in it would silently pass every page)."""
    groups = _all_groups()
    assert sum(len(g.steps) for g in groups) >= 20
    assert any(s.kind == "cli" for g in groups for s in g.steps)


def test_a_broken_block_fails(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("```python\nx = 1\n```\n\n<!-- continues -->\n```python\nassert x == 2, 'drifted'\n```\n"
                    "\n```bash\nlightning-edge no-such-command\n```\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    groups = collect(page)
    assert [len(g.steps) for g in groups] == [2, 1]
    for g in groups:
        g.page = REPO / "docs" / page.name
        with pytest.raises(AssertionError, match="failed"):
            run_group(g, tmp_path, 20)


# Paths that exist on the machine the project was written on, not in the repository; and the numbers its papers
# had there ("seed 003"), which mean nothing to a reader: the papers are named, docs/references.md.
_OUTSIDE = re.compile(r"shared/(spec|seeds)|\.\./shared|/work/|DESIGN\.md|\bseeds? 0\d\d\b")
_SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".ruff_cache", "build", "dist", ".venv", "venv", ".nox", ".tox"}
_TEXT = {".py", ".md", ".toml", ".json", ".txt", ".cfg", ".ini", ".yaml", ".yml", ".csv", ".rst"}


def _repository_files() -> list[Path]:
    """The repository's files: what git tracks or would add (ignored paths such as the CI matrix's virtual
    environments in .nox/ are not the repository's); every file under it where git cannot say."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                             capture_output=True, check=True, timeout=60).stdout
        return [REPO / f for f in out.decode("utf-8", "replace").split("\0") if f]
    except (OSError, subprocess.SubprocessError):
        return [p for p in REPO.rglob("*") if not _SKIP_DIRS.intersection(p.relative_to(REPO).parts)]


def test_no_reference_to_a_file_outside_the_repository():
    offenders = []
    for path in _repository_files():
        if not path.is_file() or path.suffix not in _TEXT or _SKIP_DIRS.intersection(path.relative_to(REPO).parts):
            continue
        if path == Path(__file__).resolve():
            continue
        for n, text in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if _OUTSIDE.search(text):
                offenders.append(f"{path.relative_to(REPO)}:{n}: {text.strip()[:120]}")
    assert not offenders, "references to files outside the repository:\n" + "\n".join(offenders[:40])
