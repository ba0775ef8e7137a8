"""Every code block of the README and of the documentation pages runs, in order, and shows what it
prints (``tests/docs_snippets.py`` says how each kind of block runs); a block that needs what a
plain run cannot give is claimed by the test that runs it, and no block is left unrun."""

from __future__ import annotations

import re

import pytest

from docs_snippets import REPOSITORY, Block, PageRun, blocks, console_commands, output_matches, page_name, pages, \
    python_expected
from external_tools import require

PAGES = [page_name(path) for path in pages()]


@pytest.mark.parametrize("page", PAGES)
def test_the_pages_blocks_run_in_order(page, tmp_path):
    run = PageRun(tmp_path, require)
    for block in blocks(page):
        if "claimed-by" in block.directives or block.kind == "text":
            continue
        run.run(block)


def test_every_block_is_run_or_claimed():
    problems = []
    runnable = claimed = 0
    for page in PAGES:
        for block in blocks(page):
            try:
                kind = block.kind
            except ValueError as error:
                problems.append(str(error))
                continue
            claimant = block.directives.get("claimed-by")
            if claimant is None:
                runnable += kind != "text"
                continue
            name = block.directives.get("id")
            path = REPOSITORY / claimant
            if not name:
                problems.append(f"{block.where}: claimed by {claimant} without an id=NAME")
            elif not path.is_file():
                problems.append(f"{block.where}: claimed by {claimant}, which is not a file")
            elif not re.search(rf"""block\(\s*["'][^"']*{re.escape(page)}["'],\s*["']{re.escape(name)}["']\)""",
                               path.read_text()):
                problems.append(f"{block.where}: {claimant} does not run block({page!r}, {name!r})")
            else:
                claimed += 1
    assert not problems, "\n".join(problems)
    assert runnable > 15 and claimed > 15


def test_the_pages_name_only_their_repository():
    """No page sends its reader to an issue, a note or a file outside the repository."""
    outside = re.compile(r"\.\./shared|/work/|\bnotes?/|\bissue\s*#?\d+", re.IGNORECASE)
    for page in PAGES:
        for number, line in enumerate((REPOSITORY / page).read_text().splitlines(), 1):
            assert not outside.search(line), f"{page}:{number}: {line}"


def test_the_runner_checks_what_blocks_show(tmp_path):
    """The runner fails a block that prints something else than it shows, or whose command fails."""
    assert python_expected("print(1)\n# 1\n") == ["1"] and python_expected("# a comment only\n") is None
    assert output_matches(["a", "b", "c"], ["a", "...", "c"]) and not output_matches(["a", "b"], ["a", "c"])
    assert output_matches(["Row(x=1), Row(x=2)"], ["Row(x=1), ..."])
    assert console_commands("$ echo a\na\n$ true\n\nnot output\n") == [("echo a", ["a"]), ("true", [])]
    run = PageRun(tmp_path, require)
    with pytest.raises(AssertionError, match="printed"):
        run.run(Block("README.md", 1, "python", "print(2)\n# 3\n"))
    with pytest.raises(AssertionError, match="exit 1"):
        run.run(Block("README.md", 1, "sh", "true\nfalse\ntrue\n"))
    with pytest.raises(AssertionError, match="printed"):
        run.run(Block("README.md", 1, "console", "$ echo a\nb\n"))
    with pytest.raises(ValueError, match="info string"):
        Block("README.md", 1, "", "x\n").kind
    run.run(Block("README.md", 1, "sh", "logstore --dir d topics create t\n"))  # this venv's logstore, in the work dir
    assert (tmp_path / "d" / "t-0").is_dir()
