"""Every reference in the repository points at something in the repository.

A maintainer who reads "see docs/design.md §5" in a docstring must find that file and that section; a
reference to a design note, a numbered section or an issue tracker that is not in the repository is a
dead end. Checked in the code (``logstore/``, ``cli/``, ``tests/``, ``scripts/``), the README, the
docs and the build files:

- a ``name.md`` reference resolves to a file (beside the referring file, at the repository root or in
  ``docs/``), and so does a relative Markdown link ``[text](path)``;
- a section mark ``§N`` follows a ``.md`` reference on the same line (``docs/design.md §3``, or a list
  ``docs/design.md §3, §4``) and that file has a heading numbered ``N`` (``## 3. ...``, ``### 3.2 ...``);
  inside a Markdown page a bare ``§N`` is one of the page's own sections; ``RFC 5802 §3`` is a
  public standard's;
- a path to a module of the repository (``logstore/log/log.py``, ``tests/conftest.py``) names a file
  that exists (code moves; its mentions must follow);
- no "issue N": issue numbers live in the tracker, not in the code or the docs.
"""

from __future__ import annotations

import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
SKIP_PARTS = {"node_modules", ".venv", "__pycache__", ".git", "test-results", ".hypothesis", "build", "dist"}

MD_REFERENCE = re.compile(r"(?<![\w/.:-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
SECTION = re.compile(r"§\s*(\d+(?:\.\d+)*)")
SECTION_AFTER_FILE = re.compile(r"((?:[\w.-]+/)*[\w.-]+\.md)[)`*]*((?:[ ,]*(?:and |or )?§\s*\d+(?:\.\d+)*(?:[-–]\d+(?:\.\d+)*)?)+)")
MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
REPOSITORY_PATH = re.compile(r"(?<![\w/.-])((?:logstore|cli|tests|scripts|docs|fixtures)/(?:[\w.-]+/)*[\w-]+\.py)\b")
ISSUE_NUMBER = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
HEADING = re.compile(r"^#+\s+(\d+(?:\.\d+)*)\.?\s", re.MULTILINE)


def text_files() -> list[Path]:
    found = []
    for folder in ("logstore", "cli", "tests", "scripts", "docs"):
        found.extend(path for path in (REPOSITORY / folder).rglob("*")
                     if path.is_file() and path.suffix in (".py", ".md", ".toml", ".txt", ".json", ".js", ".sh")
                     and not SKIP_PARTS & set(path.relative_to(REPOSITORY).parts))
    found.extend(REPOSITORY / name for name in ("README.md", "pyproject.toml", "pyspark_logstore.py", ".ci/run")
                 if (REPOSITORY / name).exists())
    return sorted(found)


def resolve(reference: str, referrer: Path) -> Path | None:
    """The file a ``.md`` reference or relative link names, looked for beside ``referrer``, at the
    repository root and in ``docs/``; None when there is none."""
    for base in (referrer.parent, REPOSITORY, REPOSITORY / "docs"):
        candidate = (base / reference).resolve()
        if candidate.is_file() and candidate.is_relative_to(REPOSITORY):
            return candidate
    return None


def headings(path: Path) -> set[str]:
    return set(HEADING.findall(path.read_text()))


def problems_in(text: str, referrer: Path) -> list[str]:
    """Every dead reference in ``text`` (the content of ``referrer``), as ``"line: what"``."""
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in MD_REFERENCE.finditer(line):  # (not inside a URL: the look-behind skips those)
            if resolve(match.group(1), referrer) is None:
                problems.append(f"{number}: {match.group(1)} is not a file in the repository")
        for match in REPOSITORY_PATH.finditer(line):
            if not (REPOSITORY / match.group(1)).is_file():
                problems.append(f"{number}: {match.group(1)} is not a file in the repository")
        covered = set()
        for match in SECTION_AFTER_FILE.finditer(line):
            target = resolve(match.group(1), referrer)
            marks = SECTION.findall(match.group(2))
            covered.update(range(match.start(2), match.end(2)))
            if target is None:
                continue  # reported above
            known = headings(target)
            for mark in marks:
                if mark not in known:
                    problems.append(f"{number}: {match.group(1)} has no section {mark}")
        for match in SECTION.finditer(line):
            if match.start() in covered or re.search(r"RFC \d+\s*$", line[:match.start()]):
                continue  # a section of a file named before it, or of a public RFC
            if referrer.suffix == ".md":  # a Markdown page's own sections
                if match.group(1) not in headings(referrer):
                    problems.append(f"{number}: §{match.group(1)} is not a section of this page")
            else:
                problems.append(f"{number}: §{match.group(1)} names no file (write e.g. docs/design.md §{match.group(1)})")
        for match in ISSUE_NUMBER.finditer(line):
            problems.append(f"{number}: {match.group(0)!r}: issue numbers are the tracker's, not the repository's")
        if referrer.suffix == ".md":
            for match in MARKDOWN_LINK.finditer(line):
                link = match.group(1).split("#", 1)[0]
                if link and "://" not in link and not link.startswith("mailto:") and resolve(link, referrer) is None:
                    problems.append(f"{number}: link {match.group(1)} is not a file in the repository")
    return problems


def test_every_reference_resolves():
    problems = []
    for path in text_files():
        if path == Path(__file__).resolve():
            continue  # its own examples
        problems.extend(f"{path.relative_to(REPOSITORY)}:{problem}" for problem in problems_in(path.read_text(), path))
    assert not problems, "references that lead nowhere:\n" + "\n".join(problems)


def test_the_design_doc_exists_and_is_numbered():
    design = REPOSITORY / "docs" / "design.md"
    assert design.is_file()
    assert {"1", "2", "3", "4", "5"} <= headings(design)


def test_the_checker_finds_dead_references():
    here = REPOSITORY / "logstore" / "log" / "log.py"
    assert problems_in("see docs/design.md §2 and docs/FORMAT.md", here) == []
    assert problems_in("(docs/design.md §2, §3)", here) == []
    assert problems_in("[docs/FORMAT.md](docs/FORMAT.md) §4", REPOSITORY / "README.md") == []
    assert problems_in("as DESIGN.md §1 says", here) == [
        "1: DESIGN.md is not a file in the repository", ]
    assert problems_in("the wire layout (reference §3.2)", here) == [
        "1: §3.2 names no file (write e.g. docs/design.md §3.2)"]
    assert problems_in("see reference/kafka-wire-protocol.md", here) == [
        "1: reference/kafka-wire-protocol.md is not a file in the repository"]
    assert problems_in("docs/design.md §99", here) == ["1: docs/design.md has no section 99"]
    assert problems_in("the nonce (RFC 5802 §3)", here) == []
    design = REPOSITORY / "docs" / "design.md"
    assert problems_in("as §3.1 says", design) == [] and problems_in("as §42 says", design) == [
        "1: §42 is not a section of this page"]
    assert problems_in("built for issue 17's security", here) == [
        "1: 'issue 17': issue numbers are the tracker's, not the repository's"]
    assert problems_in("Kafka's spec: https://kafka.apache.org/protocol.html", here) == []
    assert problems_in("https://github.com/apache/kafka/blob/trunk/README.md", here) == []
    assert problems_in("written by logstore/log/log.py", here) == []
    assert problems_in("see logstore/server/producer_state.py", here) == [
        "1: logstore/server/producer_state.py is not a file in the repository"]
    readme = REPOSITORY / "README.md"
    assert problems_in("[the format](docs/FORMAT.md#batches)", readme) == []
    assert problems_in("[gone](docs/nothing.md)", readme) == [
        "1: docs/nothing.md is not a file in the repository", "1: link docs/nothing.md is not a file in the repository"]
