"""Text in report.html stays text: the landing page (results/report.rst) as Snakemake
renders a global description (Jinja2, then docutils to HTML), with values that try to
be HTML, reStructuredText directives, links or Jinja2; and every file the rules show in
the report has a type the report displays as text or image, never as HTML."""

import re

import pytest
from docutils.core import publish_parts
from jinja2 import Environment
from snakemake.report.common import mime_from_file

from shardflow.sweep.report import TABLE_FILES
from shardflow.workflow.landing import Section, first_page, page_problem, render
from tests.conftest import REPO

SCRIPT = "<script>alert(1)</script>"


def _as_snakemake_renders_it(rst: str) -> str:
    """snakemake.report.auto_report on a global description: Jinja2 with the same
    options (no autoescape), then docutils' HTML writer with its default settings
    (raw HTML and file insertion enabled), here also failing on any warning."""
    text = Environment(trim_blocks=True, lstrip_blocks=True).from_string(rst).render(
        snakemake=None, categories={}, files=[]
    )
    return publish_parts(text, writer_name="html", settings_overrides={"report_level": 2, "halt_level": 2})[
        "html_body"
    ]


def test_a_document_with_a_script_tag_stays_text():
    html = _as_snakemake_renders_it(render([Section(f"Sweep: {SCRIPT}", [("best", f"doc {SCRIPT} end")])]))
    assert "<script" not in html
    assert "Sweep: &lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "doc &lt;script&gt;alert(1)&lt;/script&gt; end" in html


def test_a_newline_cannot_end_the_table_and_start_a_raw_html_directive():
    value = f"a\n\n.. raw:: html\n\n   {SCRIPT}\n"
    html = _as_snakemake_renders_it(render([Section("Embedding: d", [("k\r\n", value), ("other", "\x00b")])]))
    assert "<script" not in html and html.count("<table") == 1
    assert "a .. raw:: html &lt;script&gt;" in html


def test_a_cell_cannot_be_a_directive_that_inserts_a_file(tmp_path):
    secret = tmp_path / "host-file.txt"
    secret.write_text("CONTENT-OF-A-HOST-FILE\n")
    html = _as_snakemake_renders_it(
        render([Section("Training: t", [("tokenizer", f".. include:: {secret}"), (".. raw:: html", "x")])])
    )
    assert "CONTENT-OF-A-HOST-FILE" not in html
    assert f".. include:: {secret}" in html and ".. raw:: html" in html


def test_a_value_is_no_link_and_no_jinja2():
    rows = [("device", "javascript:alert(1)"), ("params", "{{ 7 * 7 }} {% if true %}yes{% endif %} {# c #}"),
            ("plain", "train: 9 points, lr=0.001, `x` *y* |z| _w a_")]
    html = _as_snakemake_renders_it(render([Section("Sweep: s", rows)]))
    assert "href" not in html and "javascript:alert(1)" in html
    assert "{{ 7 * 7 }} {% if true %}yes{% endif %} {# c #}" in html and "49" not in html
    assert "train: 9 points, lr=0.001, `x` *y* |z| _w a_" in html


def test_ordinary_values_read_unchanged_in_the_rst_file():
    text = render([Section("Embedding: e2e", [("records in", "90 read, 0 rejected"), ("stage", "train: 9 points")])])
    assert "Embedding: e2e\n" in text and "90 read, 0 rejected" in text and "train: 9 points" in text


def _report_files() -> list[str]:
    """Every path a rule flags with report(), and what a sweep shows (sweep_outputs in
    rules/common.smk: the summary table, the best point and its figures, all .png)."""
    paths = []
    for rules in sorted((REPO / "rules").glob("*.smk")):
        paths += re.findall(r'report\(\s*f?"([^"]+)"', rules.read_text())
    return paths + [TABLE_FILES["summary_csv"], TABLE_FILES["best"], "plots/best_val_loss_vs_lr.png"]


def test_the_report_shows_no_file_as_html():
    """report.html opens a text/html result in an iframe, as HTML; everything else as an
    image or in a <pre> (text). A new kind of report file makes this test look again."""
    files = _report_files()
    assert len(files) > 15 and any(f.endswith("sample.txt") for f in files)
    mimes = {path: mime_from_file(path)[0] for path in files}
    assert set(mimes.values()) <= {"image/png", "application/json", "text/plain", "text/csv"}, mimes


HOSTILE_VALUES = [
    f"a\n\n.. raw:: html\n\n   {SCRIPT}\n", ".. include:: /etc/passwd", "{{ 7 * 7 }} {% if true %}{% endif %}",
    "javascript:alert(1)", "`x <javascript:alert(1)>`_", "\\", "*", ":", "{", "x\\",
]


def test_every_page_render_writes_is_accepted_as_a_landing_page():
    """page_problem accepts what render writes, hostile values escaped included: the
    report's first page when it comes from a bucket or a results/ folder."""
    sections = [Section("Embedding: e2e", [("records in", "90 read, 0 rejected"), ("stage", "train: 9 points")]),
                Section(f"Sweep: {SCRIPT}", [(v, v) for v in HOSTILE_VALUES] + [("empty", "")])]
    assert page_problem(render(sections)) is None
    assert page_problem(render([])) is None


@pytest.mark.parametrize(
    "attack",
    [
        "\n.. include:: /etc/passwd\n",  # a directive after the last table
        "\n{{ cycler.__init__.__globals__.os.popen('id').read() }}\n",  # Jinja2 runs Python
        "Sweep: x\n--------\n\n=== " + "=" * 60 + "\nkey {{ 7 * 7 }}\n=== " + "=" * 60 + "\n",  # in a cell
        "Sweep: x\n--------\n\n=== " + "=" * 60 + "\nkey `l <javascript:alert(1)>`_\n=== " + "=" * 60 + "\n",
        "Sweep: x\n--------\n\n.. raw:: html\n\n",  # a directive in place of a table
    ],
)
def test_a_page_with_markup_landing_never_writes_is_refused(attack):
    page = render([Section("Embedding: e", [("records in", "9 read")])]) + attack
    assert page_problem(page) is not None
    assert page_problem("shardflow run\n=============\n\n.. include:: /etc/passwd\n") is not None


def test_first_page_is_the_landing_page_only_in_its_own_form_and_never_another_runs(tmp_path, monkeypatch):
    """first_page: the local page when it is what landing writes; with S3 storage the
    bucket's (a local page is another run's); a placeholder, with a warning, otherwise."""
    monkeypatch.chdir(tmp_path)
    warned = []
    page = tmp_path / "report.rst"
    page.write_text(render([Section("Embedding: e", [("records in", "9 read")])]))
    assert first_page("report.rst", "pending.rst", warned.append) == str(page)
    assert first_page("missing.rst", "pending.rst", warned.append) == "pending.rst" and warned == []
    # With S3 storage a local page is not this run's; without --report nothing is fetched.
    assert first_page("report.rst", "pending.rst", warned.append, storage_prefix="s3://b/run") == "pending.rst"
    # A bucket that cannot be reached: one quick try, a warning, the placeholder.
    settings = {"endpoint_url": "http://127.0.0.1:9", "access_key": "k", "secret_key": "s", "region": "us-east-1"}
    assert first_page("report.rst", "pending.rst", warned.append, storage_prefix="s3://b/run", fetch=True,
                      s3_settings=settings, cache=str(tmp_path / "c.rst")) == "pending.rst"
    assert len(warned) == 1 and "s3://b/run/report.rst not fetched" in warned[0]
    page.write_text(page.read_text() + "\n.. include:: /etc/hostname\n")
    assert first_page("report.rst", "pending.rst", warned.append) == "pending.rst"
    assert "report.rst is not a page rule landing wrote" in warned[1]


def test_the_first_page_is_fetched_where_the_storage_plugin_stored_it(tmp_path, monkeypatch):
    """A prefix with `//` (the eks profile's s3://<bucket>/<SHARDFLOW_S3_PREFIX>, the
    variable '/runs/x') is read as the plugin reads keys (core.s3.stored_prefix): the
    page was looked for at s3://b//runs/x/..., key /runs/x/... on AWS, never found, and
    the report opened on the placeholder without a warning."""
    from shardflow.core import s3

    asked = []
    monkeypatch.setattr(s3, "client", lambda *a, **k: None)
    monkeypatch.setattr(s3, "fetch", lambda url, dest, client: asked.append(url) or False)
    for prefix in ("s3://b//runs/x", "s3://b/runs//x/", "s3://b/runs/x"):
        first_page("results/report.rst", "pending.rst", print, storage_prefix=prefix, fetch=True,
                   cache=str(tmp_path / "c.rst"))
    assert asked == ["s3://b/runs/x/results/report.rst"] * 3
