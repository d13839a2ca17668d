"""The documentation is a test: every ```python block of README.md and docs/*.md runs as written.

Conventions a documentation block follows (the test enforces them):

- Each ```python block is complete: it imports what it uses and defines every name. It runs in
  a fresh namespace with a fresh temporary directory as the working directory, **twice** in the
  same directory (a second run must succeed too: re-running a quickstart is what users do), so
  relative paths in the docs are the usual choice.
- What a block prints is checked when the text says it: each ``# prints: TEXT`` comment (after
  the statement, or on a line of its own) is the next line of expected output, in order; a
  ```text block directly after the code block (blank lines and a line ending in ``prints:`` in
  between are allowed) holds the lines printed after those (or the whole output, when the
  block has no ``# prints:``). All of it is compared, line by line. ``...`` in expected text matches any
  characters within a line (as doctest's ELLIPSIS). Blocks without either may print anything.
- Blocks that need a server say so in a comment ``# docs-test: seaweedfs`` or
  ``# docs-test: nginx``; the test starts it with the fixtures of tests/_servers.py and rewrites
  the placeholder addresses the text uses:
  * seaweedfs: ``http://127.0.0.1:8333`` -> the server's endpoint, ``s3://bucket/`` -> the
    test bucket under a fresh prefix, and the credentials come from the standard AWS
    environment variables (which the text says shardstore reads);
  * nginx: the working directory is a fresh directory served by nginx, and
    ``http://127.0.0.1:8080/`` -> its URL (the text says: serve the current directory there).
- ```sh blocks whose every command line starts with ``shardstore `` are run as well (in-process
  through ``shardstore.cli.main``), after the file's ```python blocks that come before them ran
  in the same directory; they must exit 0, twice. Other shell blocks (installation,
  benchmarks, the test suite itself) are not run here.
- Files are found by glob (README.md and docs/*.md), so pages added later are covered too.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest_plugins = ["_servers"]  # the seaweedfs / nginx fixtures

REPO = Path(__file__).resolve().parent.parent
DOC_FILES = sorted([REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])

_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"#\s*docs-test:\s*(\w+)")
_PRINTS = re.compile(r"#\s*prints:\s?(.*)$")


@dataclass
class Block:
    file: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    expected_text: str | None  # a ```text block right after it

    @property
    def id(self) -> str:
        name = self.file.relative_to(REPO) if self.file.is_relative_to(REPO) else self.file.name
        return f"{name}:{self.line}"

    @property
    def servers(self) -> list[str]:
        return _MARKER.findall(self.code)


def extract_blocks(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        body = "\n".join(lines[start + 1 : j]) + "\n"
        blocks.append(Block(path, start + 1, lang, body, None))
        i = j + 1
        if lang == "text" and len(blocks) >= 2 and blocks[-2].lang == "python" and _adjacent(lines, blocks[-2], start):
            blocks[-2].expected_text = body
            blocks.pop()
    return blocks


def _adjacent(lines: list[str], prev: Block, text_start: int) -> bool:
    """True when only blank lines or a '... prints:' line separate ``prev`` from the text fence."""
    end = prev.line + prev.code.count("\n")  # index of prev's closing fence
    between = [ln.strip() for ln in lines[end + 1 : text_start]]
    return all(not ln or ln.endswith("prints:") for ln in between)


def _python_blocks() -> list[Block]:
    return [b for f in DOC_FILES for b in extract_blocks(f) if b.lang == "python"]


def _cli_blocks() -> list[Block]:
    found = []
    for f in DOC_FILES:
        for b in extract_blocks(f):
            cmds = [ln for ln in b.code.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
            if b.lang == "sh" and cmds and all(ln.lstrip().startswith("shardstore ") for ln in cmds):
                found.append(b)
    return found


def expected_output(block: Block) -> list[str] | None:
    """The lines the block is documented to print, or None when it documents nothing."""
    wanted = [m.group(1).rstrip() for ln in block.code.splitlines() if (m := _PRINTS.search(ln))]
    if block.expected_text is not None:
        wanted += block.expected_text.rstrip("\n").splitlines()
    return wanted or None


def _matches(expected: str, actual: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in expected.rstrip().split("..."))
    return re.fullmatch(pattern, actual.rstrip()) is not None


def check_output(block: Block, printed: str) -> None:
    expected = expected_output(block)
    if expected is None:
        return
    actual = printed.rstrip("\n").splitlines()
    ok = len(actual) == len(expected) and all(_matches(e, a) for e, a in zip(expected, actual))
    assert ok, f"{block.id}: printed\n{printed}\nbut the text says\n" + "\n".join(expected)


@contextlib.contextmanager
def _cwd(path: Path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _exec(code: str, name: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, name, "exec"), {"__name__": "__docs__"})  # noqa: S102 - running the docs is the test
    return out.getvalue()


def _prepare(block: Block, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
             tmp_path: Path) -> tuple[str, Path]:
    """The code to run (server addresses substituted) and the directory to run it in."""
    code, workdir = block.code, tmp_path
    for server in block.servers:
        if server == "seaweedfs":
            s3 = request.getfixturevalue("seaweedfs")
            for k, v in s3.env().items():
                monkeypatch.setenv(k, v)
            prefix = uuid.uuid4().hex[:12]
            code = code.replace("http://127.0.0.1:8333", s3.endpoint)
            code = code.replace("s3://bucket/", f"s3://{s3.bucket}/{prefix}/")
        elif server == "nginx":
            web = request.getfixturevalue("nginx")
            sub = uuid.uuid4().hex[:12]
            workdir = web.root / sub
            workdir.mkdir()
            code = code.replace("http://127.0.0.1:8080/", f"{web.url}/{sub}/")
        else:
            raise AssertionError(f"{block.id}: unknown '# docs-test: {server}' marker")
    return code, workdir


def test_doc_files_found() -> None:
    names = {p.name for p in DOC_FILES}
    assert {"README.md", "n5.md", "precomputed.md", "bcolz.md"} <= names
    assert len(_python_blocks()) >= 9


@pytest.mark.parametrize("block", _python_blocks(), ids=lambda b: b.id)
def test_python_block_runs_twice(block: Block, request: pytest.FixtureRequest,
                                 monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    code, workdir = _prepare(block, request, monkeypatch, tmp_path)
    with _cwd(workdir):
        for attempt in (1, 2):
            printed = _exec(code, f"{block.id} (run {attempt})")
            check_output(block, printed)


@pytest.mark.parametrize("block", _cli_blocks(), ids=lambda b: b.id)
def test_cli_block_runs_twice(block: Block, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from shardstore.cli import main

    before = [b for b in extract_blocks(block.file) if b.lang == "python" and b.line < block.line and not b.servers]
    with _cwd(tmp_path):
        for b in before:
            _exec(b.code, b.id)
        for _ in (1, 2):
            for line in block.code.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                argv = shlex.split(line, comments=True)[1:]
                code = main(argv)
                out, err = capsys.readouterr()
                assert code == 0, f"{block.id}: `{line}` exited {code}\n{out}\n{err}"


def test_extractor_conventions(tmp_path: Path) -> None:
    """The conventions above, on a small page: prints comments, a text block, markers."""
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nprint(1 + 1)  # prints: 2\nprint('a b')  # prints: a ...\n```\n\n"
        "```python\n# docs-test: nginx\nprint('x'); print('y')\n```\nIt prints:\n\n```text\nx\ny\n```\n"
        "```sh\nshardstore info a.zarr\n```\n"
    )
    blocks = extract_blocks(page)
    assert [b.lang for b in blocks] == ["python", "python", "sh"]
    assert expected_output(blocks[0]) == ["2", "a ..."]
    assert blocks[1].expected_text == "x\ny\n" and blocks[1].servers == ["nginx"]
    check_output(blocks[0], "2\na b c\n")
    with pytest.raises(AssertionError):
        check_output(blocks[0], "3\na b\n")
    with pytest.raises(AssertionError):
        check_output(blocks[1], "x\n")
