"""The documentation keeps up with the code: the generated configuration page is current,
every setting says what it does, README stays a five-minute read, relative links land,
and nothing in the repository points at a file outside it."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app import config_docs

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 250
REGENERATE = "make docs   (or: .venv/bin/python -m app.config_docs --write)"

# Spelled in pieces so this file does not match itself.
OUTSIDE_REFERENCES = re.compile("|".join([
    r"DESIG[N]\.md",
    r"\.\./shared",
    r"(?<![\w.])/wor[k]/",
]))
NOT_SCANNED_DIRS = {".git", ".venv", ".data", "node_modules", "__pycache__", ".pytest_cache",
                    ".build", ".serverless", "build"}


# -- the generated configuration page ------------------------------------------------------

def test_configuration_page_matches_the_settings():
    page = ROOT / "docs" / "configuration.md"
    expected = config_docs.render()
    actual = page.read_text() if page.exists() else ""
    assert actual == expected, (
        f"docs/configuration.md is out of date with the settings classes; regenerate it: {REGENERATE}")


def test_every_setting_has_a_description():
    missing = config_docs.missing_descriptions()
    assert not missing, (
        "these settings have no description (Field(..., description=...)), so docs/configuration.md "
        f"cannot say what they do: {', '.join(missing)}")


def test_check_mode_fails_on_a_stale_page(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "configuration.md"
    stale.write_text(config_docs.render().replace("PIPELINE_BUDGET_SECONDS", "PIPELINE_BUDGET", 1))
    monkeypatch.setattr(config_docs, "PAGE", stale)
    assert config_docs.main(["--check"]) == 1
    assert "make docs" in capsys.readouterr().err
    assert config_docs.main(["--write"]) == 0
    assert config_docs.main(["--check"]) == 0


PLUGIN_SETTINGS = '''
from typing import ClassVar, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.settings import Settings  # imported, not defined here: not documented twice


class PluginSettings(BaseSettings):
    """What the plug-in reads from the environment.

    A second paragraph that the page leaves out."""

    model_config = SettingsConfigDict(env_prefix="plug_")
    kinds: ClassVar[tuple[str, ...]] = ("a", "b")  # not a setting

    speed: float = Field(1.5, gt=0, le=10, description="how fast | how often")
    # a note about mode, not a heading
    mode: Literal["a", "b"] = Field("a", description="which mode")

    # Fetching: what leaves
    # the machine.
    target: str | None = Field(None, alias="PLUG_TARGET_URL", description="where to")
    retries: int = Field(3, ge=0, le=9)
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    package = tmp_path / "fake_plugin"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text(textwrap.dedent(PLUGIN_SETTINGS))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "fake_plugin.settings"
    sys.modules.pop("fake_plugin.settings", None)
    sys.modules.pop("fake_plugin", None)


def test_a_plugin_settings_class_gets_its_own_section(plugin):
    page = config_docs.render(["app.settings", plugin])
    section = page[page.index("## `PluginSettings`"):]
    assert page.count("## `Settings`") == 1
    assert "What the plug-in reads from the environment. Read from the environment." in section
    assert "second paragraph" not in section
    assert "| `PLUG_SPEED` | number, > 0, ≤ 10 | `1.5` | how fast \\| how often |" in section
    assert "| `PLUG_MODE` | one of `a`, `b` | `a` | which mode |" in section
    # a comment after a blank line names a group; one right under a field does not
    headings = re.findall(r"^### (.+)$", section, re.M)
    assert headings == ["General", "Fetching: what leaves the machine"]
    assert "| `PLUG_TARGET_URL` | text (optional) | unset | where to |" in section
    assert "| `PLUG_RETRIES` | integer, 0 to 9 | `3` | *(no description yet)* |" in section
    assert config_docs.missing_descriptions([plugin]) == [f"{plugin}.PluginSettings.retries"]


def test_plugin_settings_modules_are_found_when_present(tmp_path, monkeypatch):
    (tmp_path / "outreach").mkdir()
    (tmp_path / "crm").mkdir()
    (tmp_path / "crm" / "settings.py").write_text("")
    monkeypatch.setattr(config_docs, "APP_DIR", tmp_path)
    assert config_docs.settings_modules() == ["app.settings", "app.crm.settings"]


# -- README and links ----------------------------------------------------------------------

def test_readme_is_a_five_minute_read():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; keep it to {README_MAX_LINES} and move reference "
        "material to docs/")



def test_readme_try_it_uses_what_make_run_prints():
    """The copy-paste commands read the files `make run` writes and call the port it serves."""
    from app import dev
    from app.settings import Settings

    readme = (ROOT / "README.md").read_text()
    data_dir = Settings.model_fields["local_data_dir"].default
    base_url = (f"http://{Settings.model_fields['local_host'].default}:"
                f"{Settings.model_fields['local_port'].default}")
    for needed in (f"cat {data_dir}/{dev.ADMIN_KEY_FILE}", f"cat {data_dir}/{dev.SECRET_FILE}",
                   f"{base_url}/cron/pipeline", f"{base_url}/jobs", '-H "Authorization: Bearer $KEY"'):
        assert needed in readme, f"README.md's Try it should use {needed!r}, as app/dev.py does"


FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def anchors(markdown: Path) -> set[str]:
    """The #fragments GitHub makes for a page's headings, plus explicit <a id> anchors."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in _prose_lines(markdown.read_text()):
        found.update(HTML_ANCHOR.findall(line))
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1)).strip().lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def broken_links(markdown: Path) -> list[str]:
    problems = []
    for line in _prose_lines(markdown.read_text()):
        line = re.sub(r"`[^`]*`", "", line)  # code spans are not links
        targets = LINK.findall(line) + REFERENCE.findall(line)
        for target in targets:
            if SCHEME.match(target):
                continue  # http(s):, mailto: ... are not files
            path, _, fragment = target.partition("#")
            file = (markdown.parent / path).resolve() if path else markdown
            if not file.exists():
                problems.append(f"{markdown.name}: {target} (no such file)")
            elif fragment and file.suffix == ".md" and fragment not in anchors(file):
                problems.append(f"{markdown.name}: {target} (no heading #{fragment} in {file.name})")
    return problems


def test_relative_links_in_readme_and_docs_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    problems = [p for page in pages for p in broken_links(page)]
    assert not problems, "links to nothing:\n  " + "\n  ".join(problems)


def test_the_link_check_finds_a_broken_link(tmp_path):
    (tmp_path / "there.md").write_text("# Right here\n")
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent("""\
        # Page
        [ok](there.md) [ok too](there.md#right-here) [self](#page) [web](https://example.com/x)
        [gone](missing.md) and [wrong anchor](there.md#nowhere)
        `[in code](missing-too.md)`
        ```
        [in a block](missing-three.md)
        ```
        [ref]: ./also-missing.md
        """))
    assert broken_links(page) == [
        "page.md: missing.md (no such file)",
        "page.md: there.md#nowhere (no heading #nowhere in there.md)",
        "page.md: ./also-missing.md (no such file)",
    ]


# -- nothing outside the repository --------------------------------------------------------

def repository_files(root: Path) -> list[Path]:
    """Tracked files, and new ones git does not ignore; every file when git is unavailable."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root, capture_output=True, check=True).stdout.decode().split("\0")
        files = [root / name for name in listed if name]
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in root.rglob("*") if p.is_file()]
    return [f for f in files
            if f.is_file() and not NOT_SCANNED_DIRS.intersection(f.relative_to(root).parts)]


def outside_references(root: Path) -> list[str]:
    hits = []
    for file in repository_files(root):
        data = file.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            match = OUTSIDE_REFERENCES.search(line)
            if match:
                hits.append(f"{file.relative_to(root)}:{number}: {match.group(0)}")
    return hits


def test_nothing_refers_to_a_file_outside_the_repository():
    hits = outside_references(ROOT)
    assert not hits, ("these lines refer to files outside the repository, which a reader of "
                      "the repository cannot open:\n  " + "\n  ".join(hits))


def test_the_outside_reference_check_finds_one(tmp_path):
    # the planted references are spelled in pieces so this file itself holds none
    (tmp_path / "notes.md").write_text("see DES" + "IGN.md\nfine: https://example.com/wo" + "rk/x\n")
    (tmp_path / "bench.py").write_text("PEERS = '/wo" + "rk/shared/peers'\nOTHER = '.." + "/shared/x'\n")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "x.py").write_text("'/wo" + "rk/'\n")
    (tmp_path / "blob.bin").write_bytes(b"\0/wo" + b"rk/")
    assert sorted(outside_references(tmp_path)) == [
        "bench.py:1: /wo" "rk/", "bench.py:2: .." "/shared", "notes.md:1: DES" "IGN.md"]
