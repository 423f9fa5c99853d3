"""The documents the code cites are in the repository and say what is cited; the guide builds.

Comments and docstrings cite docs/architecture.md and docs/protocols.md by section ("docs/protocols.md
§3.3"); each cited section must exist, so renumbering a document cannot leave a citation pointing at
nothing. Nothing cites a document outside the repository or an issue number (a newcomer has only the
tree), and every file path named in the code, the README or the guide's pages exists (a module that
moved must take its mentions with it). docs/architecture.md §1.1 is the index of the tree: every
package under proxy/ is in it, and every module it names exists. The README is one screen that starts
with the two commands (the second is what .ci/run runs) and links every page of the guide, and the
guide (.mkdocs.yml) builds with `mkdocs build --strict`: no broken link or anchor.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT

DOCS = ("architecture", "protocols")
SOURCES = [p for top in ("proxy", "tests", "bench") for p in sorted((ROOT / top).rglob("*.py"))]
PAGES = sorted((ROOT / "docs").rglob("*.md"))  # the guide's pages, the two cited documents among them
TEXTS = [*SOURCES, ROOT / "README.md", ROOT / "setup.cfg", *PAGES]

CITATION = re.compile(r"\b(architecture|protocols)\.md\)?,? (§[\d.]+(?:(?:,| and| /)? §[\d.]+)*)")
# Written so that this file does not match itself.
OUTSIDE = re.compile(r"PROTOCOL[S]\.md|DESIG[N]\.md|\.\.[/]shared|\b[Ii]ssue #?[0-9]")
FILE_PATH = re.compile(r"(?<![\w/.])((?:proxy|tests|bench)/[\w/]+\.py)\b")


def sections(doc: str) -> set[str]:
    text = (ROOT / "docs" / f"{doc}.md").read_text(encoding="utf-8")
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, re.MULTILINE))


def test_every_cited_section_exists() -> None:
    known = {doc: sections(doc) for doc in DOCS}
    missing = []
    for path in TEXTS:
        for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for match in CITATION.finditer(line):
                for section in re.findall(r"§([\d.]+)", match.group(2)):
                    if section.rstrip(".") not in known[match.group(1)]:
                        missing.append(f"{path.relative_to(ROOT)}:{line_no}: {match.group(1)}.md §{section}")
    assert not missing, "citations of sections that do not exist:\n" + "\n".join(missing)


def test_a_document_cites_its_own_sections_that_exist() -> None:
    missing = []
    for doc in DOCS:
        known = sections(doc)
        text = (ROOT / "docs" / f"{doc}.md").read_text(encoding="utf-8")
        for line_no, line in enumerate(text.splitlines(), start=1):
            own = CITATION.sub("", line)  # what is left names this document's sections
            missing += [f"docs/{doc}.md:{line_no}: §{s}" for s in re.findall(r"§([\d.]+)", own)
                        if s.rstrip(".") not in known]
    assert not missing, "references to sections that do not exist:\n" + "\n".join(missing)


def test_nothing_cites_a_document_outside_the_repository_or_an_issue() -> None:
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for path in SOURCES
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if OUTSIDE.search(line)]
    assert not found, "cite docs/architecture.md or docs/protocols.md, or give the reason itself:\n" + "\n".join(found)


def test_every_file_path_named_exists() -> None:
    missing = [f"{path.relative_to(ROOT)}:{n}: {name}" for path in TEXTS
               for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
               for name in FILE_PATH.findall(line) if not (ROOT / name).exists()]
    assert not missing, "paths that do not exist:\n" + "\n".join(missing)


def test_the_readme_links_both_documents() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for doc in DOCS:
        assert f"(docs/{doc}.md)" in readme, f"README.md does not link docs/{doc}.md"


# ---------------------------------------------------------------- the index of the tree

INDEX_ROW = re.compile(r"^\| `(proxy/[\w/.]*)` \| (.*) \|$", re.MULTILINE)


def index_rows() -> list[tuple[str, str]]:
    """(path, what it owns) of each row of docs/architecture.md §1.1 that names a path under proxy/."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    layout = text[text.index("### 1.1 Layout"):text.index("### 1.2 ")]
    return INDEX_ROW.findall(layout)


def modules_named(owns: str) -> list[str]:
    """The modules (`name`) and packages (`name/`) a package's row lists: the backquoted lower-case names
    after its first colon, leaving out what parentheses say about each."""
    while (bare := re.sub(r"\([^()]*\)", "", owns)) != owns:
        owns = bare
    return [name + slash for name, slash in re.findall(r"`([a-z_][a-z0-9_]*)(/?)`", owns.partition(":")[2])]


def test_every_package_under_proxy_is_in_the_index() -> None:
    rows = index_rows()
    indexed = {path.rstrip("/") for path, _ in rows if path.endswith("/")}
    indexed |= {f"{path}{name}".rstrip("/") for path, owns in rows if path.endswith("/")
                for name in modules_named(owns) if name.endswith("/")}
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "proxy").rglob("__init__.py")} - {"proxy"}
    missing = sorted(packages - indexed)
    assert not missing, "packages missing from docs/architecture.md §1.1 (a row of their own, or `name/` in their " \
                        "parent's row):\n" + "\n".join(missing)


def test_every_module_the_index_names_exists() -> None:
    missing = []
    for path, owns in index_rows():
        if not (ROOT / path).exists():
            missing.append(path)
        if path.endswith("/"):
            for name in modules_named(owns):
                module = ROOT / path / name
                if not ((module / "__init__.py").exists() if name.endswith("/") else module.with_suffix(".py").exists()):
                    missing.append(f"{path}{name}{'' if name.endswith('/') else '.py'} (named in the row of {path})")
    assert not missing, "docs/architecture.md §1.1 names what is not in the tree:\n" + "\n".join(missing)


def test_the_index_reader_sees_modules_and_packages() -> None:
    # The reader of the index must not pass for want of reading anything.
    named = {path: modules_named(owns) for path, owns in index_rows()}
    assert "load" in named["proxy/config/"] and "chat_completions/" in named["proxy/protocols/"]
    assert sum(len(v) for v in named.values()) > 80


# ---------------------------------------------------------------- the README and the guide

README = (ROOT / "README.md").read_text(encoding="utf-8")
DEMO_COMMAND = "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/llm-proxy demo"
TEST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"
MKDOCS = ROOT / ".mkdocs.yml"


def nav_pages() -> list[str]:
    def walk(items: list[Any]) -> list[str]:
        pages: list[str] = []
        for item in items:
            for value in (item.values() if isinstance(item, dict) else [item]):
                pages += walk(value) if isinstance(value, list) else [value]
        return pages
    config = yaml.load(MKDOCS.read_text(encoding="utf-8"), Loader=_MkdocsLoader)
    return walk(config["nav"])


class _MkdocsLoader(yaml.SafeLoader):
    """Safe loading that reads mkdocs' `!!python/name:` tags as nothing (only the nav is wanted here)."""


_MkdocsLoader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def test_the_readme_starts_with_the_two_commands() -> None:
    blocks = re.findall(r"```sh\n(.*?)\n```", README, re.DOTALL)
    assert blocks[:2] == [DEMO_COMMAND, TEST_COMMAND]
    assert README.index(TEST_COMMAND) < README.index("---"), "the two commands come before anything else"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == TEST_COMMAND, ".ci/run ends with the README's second command"


def test_the_readme_stays_one_screen() -> None:
    lines = README.splitlines()
    assert len(lines) <= 60, f"README.md has {len(lines)} lines: document the feature in the guide (docs/) and link it"


def test_the_readme_links_every_page_of_the_guide() -> None:
    pages = nav_pages()
    assert len(pages) >= 18
    missing = [page for page in pages if page != "index.md" and f"(docs/{page})" not in README]
    assert not missing, "README.md does not link these guide pages: " + ", ".join(missing)


def test_every_code_fence_is_closed() -> None:
    # An unclosed fence swallows the rest of its page into one code block, and mkdocs says nothing.
    odd = [str(page.relative_to(ROOT)) for page in [ROOT / "README.md", *PAGES]
           if len(re.findall(r"^\s*```", page.read_text(encoding="utf-8"), re.MULTILINE)) % 2]
    assert not odd, "a code fence is left open in: " + ", ".join(odd)


def test_every_page_has_one_title() -> None:
    # A section moved in at the wrong level becomes a second page title in the site's navigation.
    wrong = []
    for page in PAGES:
        prose = re.sub(r"^\s*```.*?^\s*```", "", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
        titles = re.findall(r"^# .*", prose, re.MULTILINE)
        if len(titles) != 1:
            wrong.append(f"{page.relative_to(ROOT)}: {titles}")
    assert not wrong, "pages without exactly one '# ' title:\n" + "\n".join(wrong)


def test_every_page_of_the_guide_is_in_its_nav() -> None:
    pages = {str(p.relative_to(ROOT / "docs")) for p in PAGES}
    assert pages == set(nav_pages())


def test_the_guide_builds_strictly(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    assert mkdocs, "mkdocs is not installed: pip install -e '.[test]' (mkdocs-material is in the test extra)"
    done = subprocess.run([mkdocs, "build", "--strict", "-f", str(MKDOCS), "-d", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=300, env={"PATH": str(Path(sys.executable).parent),
                                                                           "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    assert (tmp_path / "site" / "config.schema.json").exists(), "the JSON Schema is published beside the reference"
