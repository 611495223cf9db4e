"""The documentation cannot drift: tables equal their JSON, the CLI reference equals the app, the help reads
at 80 columns, the README's links resolve, and the built site loads nothing from the network."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from vsekit.cli import app
from vsekit.cli._help import EXAMPLES, PANELS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_tables = _module("gen_tables")
gen_cli = _module("gen_cli")
check_offline = _module("check_offline")


def test_every_table_in_the_docs_is_what_its_json_says():
    rendered: dict[str, str] = {}
    for page in gen_tables.PAGES:
        text = page.read_text(encoding="utf-8")
        assert gen_tables.regenerate(text, rendered) == text, f"{page.name}: run python docs/gen_tables.py"
    assert set(rendered) == set(gen_tables.TABLES), "a renderer no page uses, or a page without its table"


def test_a_changed_number_in_the_json_changes_the_table(monkeypatch):
    """The check above can fail: a table rendered from an edited JSON differs from the page."""
    real = gen_tables.load

    def edited(name):
        data = real(name)
        if name == "ranking.json":
            data["rows"][0]["dev"]["rsum"] += 1.0
        return data

    monkeypatch.setattr(gen_tables, "load", edited)
    page = (DOCS / "joint-embedding.md").read_text(encoding="utf-8")
    assert gen_tables.regenerate(page, {}) != page


def test_an_unknown_table_name_is_an_error():
    with pytest.raises(KeyError, match="unknown table 'nope'"):
        gen_tables.regenerate("<!-- table:nope -->\n<!-- /table:nope -->", {})


def test_the_cli_reference_is_generated_from_the_app():
    assert (DOCS / "cli.md").read_text(encoding="utf-8") == gen_cli.render(), "run python docs/gen_cli.py"


def _commands(group, path: list[str]):
    """Every command and subcommand (typer ships its own click: a group is what has commands)."""
    for name, command in group.commands.items():
        yield [*path, name], command
        if hasattr(command, "commands"):
            yield from _commands(command, [*path, name])


def test_every_help_reads_at_80_columns_with_its_brackets_and_no_cut_words():
    runner = CliRunner()
    root = get_command(app)
    top = runner.invoke(app, ["--help"], terminal_width=80, prog_name="vsekit")
    for panel in set(PANELS.values()):
        assert panel in top.output
    assert set(PANELS) == set(root.commands), "every command belongs to a help group"
    seen = [path for path, _ in _commands(root, [])]
    assert ["index", "build"] in seen  # subcommands are walked too
    for path, command in _commands(root, []):
        shown = runner.invoke(app, [*path, "--help"], terminal_width=80, prog_name="vsekit")
        assert shown.exit_code == 0, path
        assert "…" not in shown.output, f"vsekit {' '.join(path)} --help cuts a word at 80 columns"
        flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", shown.output).split())
        texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
        for text in texts:
            for bracketed in re.findall(r"\[[^\]\s]+\]", text):
                assert bracketed in flat, f"vsekit {' '.join(path)}: {bracketed} lost in the help"
        if len(path) == 1:
            example = EXAMPLES[path[0]]
            assert len(example) <= 78, f"vsekit {path[0]}: the example wraps at 80 columns"
            assert f" {example} " in shown.output.replace("\n", " "), (
                f"vsekit {path[0]} --help: example missing"
            )


def test_the_readme_is_short_and_its_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 220
    assert not re.search(r"\bissue \d+", text, re.I)
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), f"README links to a missing {target}"


def test_check_offline_finds_a_font_from_a_cdn(tmp_path):
    (tmp_path / "index.html").write_text(
        '<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">'
        '<a href="https://example.org/">a link a reader clicks is fine</a><script src="assets/x.js"></script>'
    )
    (tmp_path / "a.css").write_text("@font-face { src: url(//cdn.example/x.woff2) }")
    assert check_offline.external_loads(tmp_path) == [
        "a.css: //cdn.example/x.woff2",
        "index.html: https://fonts.googleapis.com/css?family=Roboto",
    ]


def test_the_built_site_loads_nothing_from_the_network(tmp_path):
    pytest.importorskip("material", reason="the docs extra is not installed (make docs installs it)")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert (site / "cli.html").is_file() and (site / "api.html").is_file()
    assert check_offline.external_loads(site) == []


def test_every_plot_is_what_its_json_draws():
    pytest.importorskip("matplotlib", reason="the docs extra is not installed (make docs installs it)")
    gen_plots = _module("gen_plots")
    for name in gen_plots.PLOTS:
        path = gen_plots.OUT / f"{name}.svg"
        assert path.read_bytes() == gen_plots.render(name), f"{path.name}: run python docs/gen_plots.py"
