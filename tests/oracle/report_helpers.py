"""Helpers of the report tests (test_report.py) and scripts/report_screenshots.sh: an honest failing
export, and the numbers a report.html shows, read back from Chromium's dumped DOM."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np


def corrupt_layer_weight(out: Path, name: str = "model.layers.1.mlp.down_proj.weight", scale: float = 1.2) -> None:
    """Scales one external f32 weight of OUT/onnx/model.onnx in its .onnx_data and re-signs hfx.json,
    so the checksums pass and the numbers really diverge from that layer on (as a wrong writer would)."""
    import onnx

    model = onnx.load(str(out / "onnx" / "model.onnx"), load_external_data=False)
    tensor = next(t for t in model.graph.initializer if t.name == name)
    ext = {e.key: e.value for e in tensor.external_data}
    assert tensor.data_type == onnx.TensorProto.FLOAT, tensor.data_type
    data = out / "onnx" / ext["location"]
    offset, length = int(ext["offset"]), int(ext["length"])
    with open(data, "r+b") as f:
        f.seek(offset)
        values = np.frombuffer(f.read(length), dtype="<f4") * np.float32(scale)
        f.seek(offset)
        f.write(values.astype("<f4").tobytes())
    manifest = json.loads((out / "hfx.json").read_text())
    manifest["files"][f"onnx/{ext['location']}"] = hashlib.sha256(data.read_bytes()).hexdigest()
    (out / "hfx.json").write_text(json.dumps(manifest, indent=2) + "\n")


class PageNumbers(HTMLParser):
    """Collects from a report page: elements by id (text and data-value), and per class the
    data-value of every element carrying it, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, dict] = {}
        self.by_class: dict[str, list[str]] = {}
        self.text_by_class: dict[str, list[str]] = {}
        self.values_in: dict[str, list[str]] = {}  # id -> data-value of every element inside it
        self._open: list[tuple[str, str | None, list[str]]] = []  # tag, id, classes

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if a.get("id"):
            self.by_id[a["id"]] = {"text": "", "value": a.get("data-value"), "class": classes,
                                   "first": a.get("data-first-divergence")}
        if "data-value" in a:
            for _, ident, _ in self._open:
                if ident:
                    self.values_in.setdefault(ident, []).append(a["data-value"])
        for c in classes:
            if "data-value" in a:
                self.by_class.setdefault(c, []).append(a["data-value"])
            self.text_by_class.setdefault(c, []).append("")
        if tag not in ("meta", "line", "rect", "br", "img", "input", "link"):
            self._open.append((tag, a.get("id"), classes))

    def handle_endtag(self, tag):
        while self._open:
            t, _, _ = self._open.pop()
            if t == tag:
                break

    def handle_data(self, data):
        for _, ident, classes in self._open:
            if ident:
                self.by_id[ident]["text"] += data
            for c in classes:
                self.text_by_class[c][-1] += data


def page_numbers(html: str) -> PageNumbers:
    p = PageNumbers()
    p.feed(html)
    return p


def dump_dom(chromium: str, page: Path) -> str:
    """The page's DOM after Chromium's headless load."""
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def screenshot(chromium: str, page: Path, png: Path, width: int = 1100, height: int = 1500) -> None:
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--window-size={width},{height}", f"--screenshot={png}", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and png.exists(), proc.stderr


if __name__ == "__main__":  # scripts/report_screenshots.sh: corrupt OUT
    corrupt_layer_weight(Path(sys.argv[1]))
