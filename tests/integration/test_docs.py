"""The documentation stays true: links resolve inside the repository, runnable snippets run.

- Every relative link in ``README.md`` and ``docs/**/*.md`` (inline ``[text](target)``, reference
  definitions ``[label]: target`` and ``<img src>`` / ``<a href>`` attributes; code blocks and
  code spans are skipped) must name an existing file or directory inside the repository. A
  ``#fragment`` pointing into a Markdown file must name one of its headings (GitHub's anchor
  rules). URLs with a scheme (``https:``, ``mailto:``) are not fetched.
- A fenced code block is *runnable* when its info string has the word ``runnable`` after the
  language (```` ```python runnable ````), or when the line before the fence is the comment
  ``<!-- runnable -->``. Each runnable Python block runs as a script with this interpreter, in
  an empty temporary directory, and must exit 0 within :data:`RUN_TIMEOUT` seconds.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = 300
RUNNABLE_COMMENT = "<!-- runnable -->"

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?(?P<target>[^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)"
)
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(?P<target>\S+?)>?(?:\s+.*)?$")
_HTML_ATTR = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*\"(?P<target>[^\"]*)\"", re.I)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def doc_files() -> list[Path]:
    """The Markdown files whose links and snippets are checked."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language, whether it is marked runnable, where it starts."""

    path: Path
    line: int
    language: str
    runnable: bool
    code: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def split_markdown(text: str, path: Path) -> tuple[list[tuple[int, str]], list[Block]]:
    """The prose lines (numbered, outside fenced code blocks) and the fenced blocks of ``text``."""
    prose: list[tuple[int, str]] = []
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None or (opening["fence"][0] == "`" and "`" in opening["info"]):
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        fence = opening["fence"]
        words = opening["info"].split()
        marked = i > 0 and lines[i - 1].strip() == RUNNABLE_COMMENT
        start, body = i + 1, []
        i += 1
        while i < len(lines):
            closing = _FENCE.match(lines[i])
            if (
                closing is not None
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
                and not closing["info"].strip()
            ):
                break
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence (or the end of the file)
        language = words[0].lower() if words else ""
        blocks.append(
            Block(path, start, language, marked or "runnable" in words[1:], "\n".join(body) + "\n")
        )
    return prose, blocks


def links(path: Path) -> list[tuple[int, str]]:
    """Every link target (line number, target) in the prose of the Markdown file ``path``."""
    prose, _ = split_markdown(path.read_text(encoding="utf-8"), path)
    found: list[tuple[int, str]] = []
    for number, line in prose:
        reference = _REFERENCE.match(line)
        if reference is not None:
            found.append((number, reference["target"]))
            continue
        text = _CODE_SPAN.sub("", line)
        found.extend((number, m["target"]) for m in _INLINE_LINK.finditer(text))
        found.extend((number, m["target"]) for m in _HTML_ATTR.finditer(text))
    return found


def github_anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of the Markdown file ``path``."""
    prose, _ = split_markdown(path.read_text(encoding="utf-8"), path)
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    for _, line in prose:
        heading = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading is None:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading[1])  # link text only
        slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def link_problem(source: Path, target: str) -> str | None:
    """Why ``target``, a link in ``source``, does not resolve inside the repository (None: it
    does, or it is a URL with a scheme, which is not checked)."""
    if not target or _SCHEME.match(target) or target.startswith("//"):
        return None
    path_part, _, fragment = target.partition("#")
    path_part = unquote(path_part.split("?", 1)[0])
    if path_part.startswith("/"):
        return "absolute paths do not resolve in a clone"
    resolved = (source.parent / path_part).resolve() if path_part else source
    try:
        resolved.relative_to(ROOT)
    except ValueError:
        return f"points outside the repository ({resolved})"
    if not resolved.exists():
        return f"no such file in the repository ({resolved.relative_to(ROOT)})"
    if (
        fragment
        and resolved.suffix == ".md"
        and resolved.is_file()
        and unquote(fragment).lower() not in github_anchors(resolved)
    ):
        return f"{resolved.relative_to(ROOT)} has no heading with anchor #{fragment}"
    return None


def runnable_blocks() -> list[Block]:
    """Every fenced block marked runnable in the checked Markdown files."""
    out: list[Block] = []
    for path in doc_files():
        _, blocks = split_markdown(path.read_text(encoding="utf-8"), path)
        out.extend(b for b in blocks if b.runnable)
    return out


# -- the checks --------------------------------------------------------------------------------
@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(path: Path) -> None:
    problems = [
        f"{path.relative_to(ROOT)}:{number}: {target}: {why}"
        for number, target in links(path)
        if (why := link_problem(path, target)) is not None
    ]
    assert not problems, "\n".join(problems)


def test_the_readme_links_the_format_and_operations_pages() -> None:
    targets = {target.partition("#")[0] for _, target in links(ROOT / "README.md")}
    assert {"docs/reference/format.md", "docs/how-to/operations.md"} <= targets


def test_the_quick_start_is_marked_runnable() -> None:
    readme = [b for b in runnable_blocks() if b.path.name == "README.md"]
    assert any("PartitionedNamespace.create" in b.code for b in readme), (
        "the README's Quick start block must be marked runnable"
    )


@pytest.mark.parametrize("block", runnable_blocks(), ids=lambda b: b.name)
def test_runnable_block_runs(block: Block, tmp_path: Path) -> None:
    assert block.language in ("python", "py"), f"{block.name}: only Python blocks can be run"
    script = tmp_path / "snippet.py"
    script.write_text(block.code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert done.returncode == 0, (
        f"{block.name} exited {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n"
        f"{done.stderr}"
    )


# -- the checker itself --------------------------------------------------------------------------
def test_checker_refuses_links_leaving_the_repository_or_missing() -> None:
    page = ROOT / "docs" / "page.md"  # never written: only its directory is used
    assert link_problem(ROOT / "README.md", "../shared/docs/FORMAT.md") is not None
    assert link_problem(page, "../../outside.md") is not None
    assert link_problem(page, "/etc/passwd") is not None
    assert link_problem(page, "no-such-file.md") is not None
    assert link_problem(ROOT / "README.md", "README.md#no-such-heading") is not None
    assert link_problem(page, "../README.md") is None
    assert link_problem(page, "https://example.com/x.md") is None
    assert link_problem(ROOT / "README.md", "#quick-start-core-api") is None


def test_checker_finds_links_and_skips_code(tmp_path: Path) -> None:
    text = (
        'See [a](one.md) and ![img](pics/b.png "title") and `[not](code.md)`.\n'
        '<a href="two.md">x</a>\n'
        "[ref]: three.md\n"
        "```python runnable\n"
        "print('[not](four.md)')\n"
        "```\n"
        "<!-- runnable -->\n"
        "```python\n"
        "pass\n"
        "```\n"
        "```bash\n"
        "echo\n"
        "```\n"
    )
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    assert [t for _, t in links(page)] == ["one.md", "pics/b.png", "two.md", "three.md"]
    _, blocks = split_markdown(text, page)
    assert [(b.language, b.runnable) for b in blocks] == [
        ("python", True),
        ("python", True),
        ("bash", False),
    ]
    assert blocks[0].code == "print('[not](four.md)')\n"


def test_github_anchors(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Quick start (core API)\n## `__manifest` columns\n## Notes\n## Notes\n", encoding="utf-8"
    )
    assert github_anchors(page) == {
        "quick-start-core-api",
        "__manifest-columns",
        "notes",
        "notes-1",
    }
