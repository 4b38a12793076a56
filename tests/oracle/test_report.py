"""The verify reports people read (issue #16, item 2; F#8, F#10, F#18, F#23):
  - report.html, rendered by headless Chromium (Debian's `chromium`, --dump-dom): the verdict line, and
    every number on the page (per shape case error and gate, per-layer divergence, greedy tokens with
    the first divergence, performance, op placement) equal to report.json's; a passing export and an
    honestly failing one (one weight of layer 1 scaled in the artifact, the manifest re-signed, so the
    numbers really diverge from layer 1 on); strings from the user's files escaped;
  - reports per runtime (verify/<runtime>/), `--runtime all` with its index and exit status, and the
    runtime picked from the formats present (an OpenVINO-only and a pt2-only export);
  - `hfx check` listing every problem at once, and `--allow-extra`.
The tiny llama only: the renderer does not depend on the family."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import hfx_has_openvino, run_hfx
from report_helpers import corrupt_layer_weight, dump_dom, page_numbers

CHROMIUM = shutil.which("chromium")


@pytest.fixture(autouse=True)
def drivers_python(monkeypatch):
    """The ONNX Runtime and torch drivers run under the venv's interpreter."""
    monkeypatch.setenv("HFX_PYTHON", sys.executable)


@pytest.fixture(scope="module")
def both(tiny_checkpoint, tmp_path_factory) -> Path:
    """The tiny llama exported to onnx (portable) and openvino, once per module."""
    assert hfx_has_openvino(), "this hfx was built without OpenVINO (scripts/setup.sh builds it)"
    out = tmp_path_factory.mktemp("report") / "both"
    run_hfx("export", "--model", tiny_checkpoint("llama"), "--format", "onnx,openvino", "--onnx-profile", "portable",
            "--quiet", out)
    return out


def fresh_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("verify"))
    return dst


@pytest.fixture(scope="module")
def passing(both, tmp_path_factory) -> Path:
    out = fresh_copy(both, tmp_path_factory.mktemp("report") / "pass")
    proc = run_hfx("verify", out, "--tokens", "12", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="module")
def failing(both, tmp_path_factory) -> Path:
    out = fresh_copy(both, tmp_path_factory.mktemp("report") / "fail")
    corrupt_layer_weight(out)
    proc = run_hfx("verify", out, "--tokens", "24", "--no-reexport", check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return out


def rendered(out: Path, runtime: str = "reference"):
    """report.json and the numbers of report.html as Chromium's DOM holds them."""
    folder = out / "verify" / runtime
    report = json.loads((folder / "report.json").read_text())
    assert CHROMIUM, "chromium is not installed (scripts/setup.sh installs Debian's package)"
    return report, page_numbers(dump_dom(CHROMIUM, folder / "report.html")), folder


def same(page_value: str, json_value) -> bool:
    """A data-value on the page against report.json's number ("inf" where JSON holds the string)."""
    if isinstance(json_value, str):
        return page_value == json_value
    return float(page_value) == float(json_value)


def three_digits(v) -> str:
    return v if isinstance(v, str) else f"{v:.3g}"


def assert_cases_match(report: dict, page) -> None:
    cases = [c for c in report["checks"] if c["name"].startswith("numbers: ")]
    assert cases and len(page.by_class["max-abs"]) == len(cases)
    names = [t.strip() for t in page.text_by_class["case-name"]]
    assert names == [c["name"][len("numbers: "):] for c in cases]
    for i, c in enumerate(cases):
        m = c["measured"]
        for cls, key in (("max-abs", "max_abs"), ("atol", "atol"), ("mean-abs", "mean_abs"), ("mismatched", "mismatched"),
                         ("elements", "elements")):
            assert same(page.by_class[cls][i], m[key]), (cls, page.by_class[cls][i], m[key])
        # what a reader sees is the same number, to 3 digits
        assert page.text_by_class["max-abs"][i] == three_digits(m["max_abs"])
        assert page.by_id[f"case-{i}"]["text"].count("pass" if c["passed"] else "FAIL") >= 1


def assert_tokens_match(report: dict, page) -> list:
    greedy = next(c for c in report["checks"] if c["name"].startswith("greedy generation"))
    expected, actual = greedy["measured"]["expected"], greedy["measured"]["actual"]
    firsts = []
    for b, (e, a) in enumerate(zip(expected, actual)):
        row = page.by_id[f"greedy-row-{b}"]
        first = next((i for i, (x, y) in enumerate(zip(e, a)) if x != y), None)
        if first is None and len(e) != len(a):
            first = min(len(e), len(a))
        assert row["first"] == ("none" if first is None else str(first))
        assert [int(v) for v in page.values_in[f"greedy-row-{b}-expected"]] == e
        assert [int(v) for v in page.values_in[f"greedy-row-{b}-actual"]] == a
        firsts.append(first)
    return firsts


def assert_tables_match(report: dict, page) -> None:
    perf = next(c for c in report["checks"] if c["name"] == "performance")["measured"]
    for key, v in perf.items():
        cell = page.by_id[f"perf-{key}"]
        assert same(cell["value"], v) if isinstance(v, (int, float)) else cell["text"] == v, (key, cell, v)
    placement = next(c for c in report["checks"] if c["name"] == "op placement")["measured"]
    counts = [n for where in placement.values() for n in where.values()]
    assert [int(v) for v in page.by_class["count"]] == counts
    assert [t for t in page.text_by_class["op"]] == [op for op, where in placement.items() for _ in where]


def test_passing_report_html(passing):
    report, page, folder = rendered(passing)
    assert report["passed"]
    assert page.by_id["verdict"]["text"] == "PASS" and "fail" not in page.by_id["verdict"]["class"]
    assert page.by_id["verdict-line"]["text"] == f"{len(report['checks'])} of {len(report['checks'])} checks passed"
    assert report["verdict"]["headline"].startswith("PASS") and "why" not in page.by_id
    assert_cases_match(report, page)
    assert all(f is None for f in assert_tokens_match(report, page))
    assert_tables_match(report, page)
    assert "divergence" not in page.by_id  # nothing diverged: no per-layer chart
    # Self-contained: no script, no link, no font or image from anywhere.
    html = (folder / "report.html").read_text()
    assert "<script" not in html and "<link" not in html and "http" not in html.replace("http://www.w3.org", "")
    assert "<svg" in html and (folder / "report.md").read_text().startswith("# hfx verify")


def test_failing_report_html(failing):
    report, page, _ = rendered(failing)
    assert not report["passed"]
    assert page.by_id["verdict"]["text"] == "FAIL" and "fail" in page.by_id["verdict"]["class"]
    failed = sum(not c["passed"] for c in report["checks"])
    assert page.by_id["verdict-line"]["text"] == f"{len(report['checks']) - failed} of {len(report['checks'])} checks passed"
    # One line why, one line what to do, the same as report.json's and report.md's.
    why, nxt = report["verdict"]["why"], report["verdict"]["next"]
    assert "first diverging layer: 1" in why and "layer 1" in nxt
    assert page.by_id["why"]["text"] == "Why: " + why and page.by_id["next"]["text"] == "What to do: " + nxt
    md = (failing / "verify" / "reference" / "report.md").read_text()
    assert f"**Why:** {why}" in md and f"**What to do:** {nxt}" in md
    assert_cases_match(report, page)
    # Per-layer divergence: the table's numbers are the report's, and layer 1 is where it starts.
    cases = [c for c in report["checks"] if c["name"].startswith("numbers: ")]
    failing_cases = [c for c in cases if not c["passed"]]
    assert failing_cases
    layer_values = [l["max_abs"] for c in failing_cases for l in c["measured"]["layers"]]
    assert len(page.by_class["layer-max-abs"]) == len(layer_values)
    assert all(same(p, v) for p, v in zip(page.by_class["layer-max-abs"], layer_values))
    assert page.by_class["first-diverging-layer"] == ["1"] * len(failing_cases)
    assert "layers-chart-" in dump_dom(CHROMIUM, failing / "verify" / "reference" / "report.html")
    # Greedy strips: the scaled weight parts the tokens somewhere, and the page marks that token.
    firsts = assert_tokens_match(report, page)
    assert any(f is not None for f in firsts)
    assert len(page.by_class["first-diff"]) == 2 * sum(f is not None for f in firsts)
    assert_tables_match(report, page)


def test_strings_from_files_are_escaped(both, tmp_path):
    """The export's path (the user's) is text on the page, never markup."""
    out = fresh_copy(both, tmp_path / 'x<b id="evil">&y')
    proc = run_hfx("verify", out, "--runtime", "reference", "--no-reexport", "--tokens", "2", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    html = (out / "verify" / "reference" / "report.html").read_text()
    assert '<b id="evil">' not in html and "x&lt;b id=&quot;evil&quot;&gt;&amp;y" in html
    page = page_numbers(dump_dom(CHROMIUM, out / "verify" / "reference" / "report.html"))
    assert "evil" not in page.by_id and page.by_id["export-dir"]["text"] == str(out)


def test_runtime_all_writes_a_folder_per_runtime_and_an_index(both, failing, tmp_path):
    """--runtime all: every runtime of every format present, one folder each, an index with each
    verdict; exit 1 when any fails (here the onnx weights are scaled: openvino's files still pass)."""
    out = fresh_copy(both, tmp_path / "all")
    proc = run_hfx("verify", out, "--runtime", "all", "--no-reexport", "--tokens", "4", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runtimes = ["reference", "onnxruntime", "openvino"]
    for rt in runtimes:
        report = json.loads((out / "verify" / rt / "report.json").read_text())
        assert report["runtime"] == rt and report["passed"]
        assert (out / "verify" / rt / "report.html").exists() and (out / "verify" / rt / "report.md").exists()
    assert sorted(p.name for p in (out / "verify").iterdir()) == sorted(runtimes + ["index.html", "index.md"])
    assert f"verified on every runtime ({', '.join(runtimes)})" in proc.stdout
    index = (out / "verify" / "index.md").read_text()
    assert all(f"| {rt} | pass |" in index for rt in runtimes), index
    page = page_numbers(dump_dom(CHROMIUM, out / "verify" / "index.html"))
    assert page.by_id["verdict"]["text"] == "PASS"

    # The failing copy, under --report DIR: DIR/<runtime>/ and DIR/index.*; the exit says it failed.
    dest = tmp_path / "reports"
    proc = run_hfx("verify", failing, "--runtime", "all", "--no-reexport", "--tokens", "4", "--report", dest, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    verdicts = {rt: json.loads((dest / rt / "report.json").read_text())["passed"] for rt in runtimes}
    assert verdicts == {"reference": False, "onnxruntime": False, "openvino": True}
    index = (dest / "index.md").read_text()
    assert "| reference | **FAIL** |" in index and "| openvino | pass |" in index
    assert "verification FAILED on 2 of 3 runtimes (reference, onnxruntime)" in proc.stdout
    page = page_numbers(dump_dom(CHROMIUM, dest / "index.html"))
    assert page.by_id["verdict"]["text"] == "FAIL"
    assert "FAIL" in page.by_id["runtime-reference"]["text"] and "pass" in page.by_id["runtime-openvino"]["text"]


@pytest.mark.parametrize("fmt, runtime", [("openvino", "openvino"), ("pt2", "torch")])
def test_runtime_picked_from_the_formats_present(tiny_checkpoint, tmp_path, monkeypatch, fmt, runtime):
    """F#8: an OpenVINO-only (or pt2-only) export used to fail with "the export has no onnx component",
    in verify and in generate."""
    out = tmp_path / fmt
    run_hfx("export", "--model", tiny_checkpoint("llama"), "--format", fmt, "--quiet", "--no-verify", out)
    run_hfx("export", "--model", tiny_checkpoint("llama"), "--quiet", "--no-verify", tmp_path / f"{fmt}-onnx")
    proc = run_hfx("verify", out, "--no-reexport", "--tokens", "4", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no onnx component" not in proc.stderr
    report = json.loads((out / "verify" / runtime / "report.json").read_text())
    assert report["runtime"] == runtime and report["passed"]
    assert sorted(p.name for p in (out / "verify").iterdir()) == [runtime]
    # hfx generate picks the same runtime, and its greedy tokens are the ones verify compared
    if runtime == "torch":
        monkeypatch.setenv("HFX_PYTHON", sys.executable)  # the torch driver runs under the venv's Python
    gen = run_hfx("generate", out, "--prompt-ids", "1,2,3", "-n", "4", "--print-ids", check=False)
    assert gen.returncode == 0 and "no onnx component" not in gen.stderr, gen.stderr
    ref = run_hfx("generate", out.parent / f"{fmt}-onnx", "--prompt-ids", "1,2,3", "-n", "4", "--print-ids")
    assert gen.stdout == ref.stdout


def test_check_lists_every_problem_then_fails(both, tmp_path):
    """F#23: every problem, one a line, not only the first."""
    out = fresh_copy(both, tmp_path / "broken")
    with open(out / "onnx" / "model.onnx_data", "r+b") as f:
        f.seek(100)
        f.write(b"\x01\x02\x03")
    (out / "openvino" / "config.json").write_text("{}\n")
    (out / "onnx" / "README.md").write_text("# a model card\n")
    proc = run_hfx("check", out, check=False)
    assert proc.returncode == 1, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 4, proc.stderr
    assert any("onnx/model.onnx_data: sha256 mismatch" in l for l in lines)
    assert any("openvino/config.json: sha256 mismatch" in l for l in lines)
    assert any("onnx/README.md: present but not in the manifest (--allow-extra allows it)" in l for l in lines)
    assert lines[-1] == f"hfx: check: {out}: 3 problems"
    assert all(l.startswith(f"hfx: check: {out}: ") for l in lines)
    # verify's first check counts them too, and points at `hfx check`
    proc = run_hfx("verify", out, "--runtime", "reference", "--no-reexport", "--tokens", "2", check=False)
    assert proc.returncode == 1
    assert f"(and 2 more problems: `hfx check {out}` lists them)" in proc.stdout, proc.stdout


def test_check_allow_extra(both, tmp_path):
    """--allow-extra: a model card beside the files is listed, not a problem; a changed file still is."""
    out = fresh_copy(both, tmp_path / "carded")
    (out / "README.md").write_text("---\nlicense: apache-2.0\n---\n# tiny llama\n")
    (out / "onnx" / "README.md").write_text("# onnx\n")
    proc = run_hfx("check", out, check=False)
    assert proc.returncode == 1 and proc.stderr.count("present but not in the manifest") == 2, proc.stderr
    proc = run_hfx("check", out, "--allow-extra", check=False)
    assert proc.returncode == 0, proc.stderr
    assert "2 extra allowed: README.md, onnx/README.md" in proc.stdout, proc.stdout
    with open(out / "onnx" / "model.onnx_data", "r+b") as f:
        f.seek(100)
        f.write(b"\x01\x02\x03")
    proc = run_hfx("check", out, "--allow-extra", check=False)
    assert proc.returncode == 1 and "onnx/model.onnx_data: sha256 mismatch" in proc.stderr, proc.stderr
    assert "README.md" not in proc.stderr


def test_runtime_all_says_which_runtime_could_not_run(both, tmp_path, monkeypatch):
    """A runtime that cannot run (here ONNX Runtime under Debian's python3, which lacks it) is a failed
    row of the index saying why, not the end of the others."""
    monkeypatch.setenv("HFX_PYTHON", "/usr/bin/python3")
    out = fresh_copy(both, tmp_path / "nopython")
    proc = run_hfx("verify", out, "--runtime", "all", "--no-reexport", "--tokens", "2", check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "hfx: --runtime onnxruntime:" in proc.stderr, proc.stderr
    assert sorted(p.name for p in (out / "verify").iterdir()) == ["index.html", "index.md", "openvino", "reference"]
    index = (out / "verify" / "index.md").read_text()
    assert "| onnxruntime | **FAIL** | did not run: " in index and "| not written |" in index, index
    assert "| reference | pass |" in index and "| openvino | pass |" in index
