"""``catcap report``: rows, escaping, sorting data, the bootstrap summary, images, bad input,
the CLI, and a real browser clicking the sort buttons of the written page."""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys
from html.parser import HTMLParser

import pytest
from PIL import Image

from caption_files import check_example_values, write_dataset, write_images, write_results
from catcap import api
from catcap.cli.main import main
from catcap.cli.report_cmds import REPORT_HELP
from catcap.metrics.errors import MetricInputError
from catcap.web.report import compute_report, write_report
from help_examples import example_commands, parse_example

# Hand-made so that per-image ROUGE-L is known without running catcap: a caption equal to a
# reference scores 1 (LCS = both lengths: P = R = 1, F = 1), a caption sharing no token with any
# reference scores 0. So ROUGE-L B - A is: image 10: 0 - 1 = -1, image 11: 1 - 0 = +1,
# image 12: 1 - 1 = 0, image 13: 0 - 0 = 0.
REFS = {10: ["a red circle on white", "a round red shape"],
        11: ["a green square", "a square that is green"],
        12: ["a blue circle", "a circle that is blue"],
        13: ["a purple square & a \"quoted\" <i>word</i>", "a violet box"]}
CAPS_A = {10: "a red circle on white", 11: "zebra", 12: "a blue circle", 13: "zebra"}
CAPS_B = {10: "zebra", 11: "a green square", 12: "a blue circle", 13: "zebra <script>alert(1)</script>"}
ROUGE_DIFF = {10: -1.0, 11: 1.0, 12: 0.0, 13: 0.0}


@pytest.fixture
def files(tmp_path):
    return {"a": write_results(tmp_path / "a.json", CAPS_A), "b": write_results(tmp_path / "b.json", CAPS_B),
            "refs": write_dataset(tmp_path, REFS), "images": write_images(tmp_path / "images", list(REFS))}


class Rows(HTMLParser):
    """The image rows' attributes and the page's <script> elements."""

    def __init__(self):
        super().__init__()
        self.rows, self.scripts, self.images = [], 0, []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tr" and attrs.get("class") == "image-row":
            self.rows.append(attrs)
        if tag == "script":
            self.scripts += 1
        if tag == "img":
            self.images.append(attrs["src"])


def parse(html_text: str) -> Rows:
    p = Rows()
    p.feed(html_text)
    return p


def test_one_row_per_image_with_both_captions_and_references(files, tmp_path):
    out = tmp_path / "report.html"
    data = write_report(out, files["a"], files["b"], files["refs"], split="test", names="base,cat", resamples=50)
    page = out.read_text(encoding="utf-8")
    rows = parse(page).rows
    assert [int(r["data-image-id"]) for r in rows] == [10, 11, 12, 13]
    assert data.metrics == ["Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "ROUGE_L", "CIDEr"]
    assert "a round red shape" in page and "a circle that is blue" in page  # references shown
    assert "<title>catcap report: base vs cat</title>" in page
    assert "http://" not in page and "https://" not in page  # nothing fetched from the network


def test_captions_and_references_are_escaped(files, tmp_path):
    out = tmp_path / "report.html"
    write_report(out, files["a"], files["b"], files["refs"], split="test", resamples=20)
    page = out.read_text(encoding="utf-8")
    assert "zebra &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>alert(1)" not in page
    assert "a purple square &amp; a &quot;quoted&quot; &lt;i&gt;word&lt;/i&gt;" in page
    assert parse(page).scripts == 2  # only the page's own: the metadata JSON and the sorting code


def test_sorting_data_are_the_per_image_differences(files, tmp_path):
    out = tmp_path / "report.html"
    data = write_report(out, files["a"], files["b"], files["refs"], split="test", resamples=20)
    k = data.metrics.index("ROUGE_L")
    diffs = {int(r["data-image-id"]): json.loads(r["data-diffs"]) for r in parse(out.read_text()).rows}
    for image_id, expected in ROUGE_DIFF.items():
        assert diffs[image_id][k] == pytest.approx(expected, abs=1e-9)
    meta = json.loads(re.search(r'id="report-meta">(.*?)</script>', out.read_text()).group(1))
    assert meta["metrics"] == data.metrics and meta["names"] == ["A", "B"]


def test_bootstrap_summary_equals_catcap_compare(files, tmp_path):
    out = tmp_path / "report.html"
    data = write_report(out, files["a"], files["b"], files["refs"], split="test", metrics="bleu,rouge,cider",
                        resamples=300, seed=7)
    expected = api.compare(files["a"], files["b"], files["refs"], split="test", metrics="bleu,rouge,cider",
                           resamples=300, seed=7)
    assert data.comparison == expected
    page = out.read_text(encoding="utf-8")
    for row in expected:
        cells = re.search(rf'<tr class="summary-row[^"]*" data-metric="{row.metric}">(.*?)</tr>', page).group(1)
        assert f"<td>{row.a:.4f}</td><td>{row.b:.4f}</td>" in cells
        assert f"[{row.low:+.4f}, {row.high:+.4f}]" in cells and f"<td>{row.p_value:.4f}</td>" in cells


def test_images_embedded_as_bounded_thumbnails_or_linked(files, tmp_path):
    out = tmp_path / "sub" / "report.html"
    write_report(out, files["a"], files["b"], files["refs"], split="test", images=files["images"], thumb=64,
                 resamples=20)
    srcs = parse(out.read_text()).images
    assert len(srcs) == 4 and all(s.startswith("data:image/jpeg;base64,") for s in srcs)
    thumb = Image.open(io.BytesIO(base64.b64decode(srcs[0].split(",", 1)[1])))
    assert thumb.format == "JPEG" and max(thumb.size) == 64  # 320 x 240 shrunk to 64 x 48
    write_report(out, files["a"], files["b"], files["refs"], split="test", images=files["images"],
                 link_images=True, resamples=20)
    srcs = parse(out.read_text()).images
    assert srcs[0] == "../images/img10.png" and (out.parent / srcs[0]).resolve() == (files["images"] / "img10.png")


def test_bad_input_gets_clear_errors_and_no_file(files, tmp_path):
    out = tmp_path / "report.html"
    fewer = write_results(tmp_path / "fewer.json", {10: "a dog"})
    with pytest.raises(MetricInputError, match="caption different images .3 only in the first"):
        compute_report(files["a"], fewer, files["refs"], split="test")
    broken = tmp_path / "broken.json"
    broken.write_text('[{"image_id": 10, "caption": "a"}', encoding="utf-8")
    with pytest.raises(MetricInputError, match="not valid JSON"):
        compute_report(files["a"], broken, files["refs"], split="test")
    with pytest.raises(MetricInputError, match="name the split"):
        compute_report(files["a"], files["b"], files["refs"])
    with pytest.raises(ValueError, match="two different names"):
        compute_report(files["a"], files["b"], files["refs"], split="test", names="onlyone")
    (files["images"] / "img12.png").unlink()
    with pytest.raises(FileNotFoundError, match=r"1 image\(s\) are not in .*img12.png.*check --images"):
        compute_report(files["a"], files["b"], files["refs"], split="test", images=files["images"])
    not_image = files["images"] / "img12.png"
    not_image.write_text("not a picture")
    with pytest.raises(ValueError, match="img12.png is not a readable image"):
        compute_report(files["a"], files["b"], files["refs"], split="test", images=files["images"])
    assert not out.exists()


def test_cli_writes_the_report_and_reports_errors(files, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(files["a"]), str(files["b"]), "--refs", str(files["refs"]), "--split", "test",
                 "--images", str(files["images"]), "--names", "base,cat", "--resamples", "50", "--out", str(out)]) == 0
    assert "report of 4 images written" in capsys.readouterr().out
    assert len(parse(out.read_text()).rows) == 4
    bad = tmp_path / "bad.html"
    assert main(["report", str(files["a"]), str(tmp_path / "missing.json"), "--refs", str(files["refs"]),
                 "--split", "test", "--out", str(bad)]) == 2
    assert "catcap report: error: results file not found" in capsys.readouterr().err
    assert not bad.exists()


def test_report_never_loads_torch(files, tmp_path):
    out = tmp_path / "r.html"
    probe = ("import sys; from catcap.cli.main import main; "
             f"rc = main(['report', {str(files['a'])!r}, {str(files['b'])!r}, '--refs', {str(files['refs'])!r}, "
             f"'--split', 'test', '--images', {str(files['images'])!r}, '--resamples', '20', '--out', {str(out)!r}]); "
             "print(rc, 'torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert res.stdout.split()[-2:] == ["0", "False"] and out.is_file()


def test_help_examples_parse():
    commands = example_commands(REPORT_HELP)
    assert len(commands) == 2
    for argv in commands:
        args = parse_example(argv)
        assert args.func.__name__ == "cmd_report"
        check_example_values(argv, args)


def test_browser_sorts_and_filters_the_rows(browser, files, tmp_path):
    from selenium.webdriver.common.by import By

    out = tmp_path / "report.html"
    write_report(out, files["a"], files["b"], files["refs"], split="test", images=files["images"], names="base,cat",
                 resamples=50)
    browser.get(out.as_uri())

    def first_ids():
        return [int(r.get_attribute("data-image-id")) for r in browser.find_elements(By.CSS_SELECTOR, "tr.image-row")
                if r.is_displayed()]

    assert first_ids() == [10, 11, 12, 13]
    browser.find_element(By.ID, "sort-ROUGE_L-b").click()  # B - A descending: +1, 0, 0 (in order), -1
    assert first_ids() == [11, 12, 13, 10]
    assert browser.find_element(By.ID, "sorted-by").text == "sorted by ROUGE_L: cat better first"
    browser.find_element(By.ID, "sort-ROUGE_L-a").click()  # ascending: -1, 0, 0, +1
    assert first_ids() == [10, 12, 13, 11]
    browser.find_element(By.ID, "sort-ROUGE_L-abs").click()  # |B - A|: 1 (10), 1 (11), 0, 0
    assert first_ids() == [10, 11, 12, 13]
    browser.save_screenshot(str(tmp_path / "report-sorted.png"))
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(By.ID, "who")).select_by_value("b")  # on ROUGE_L (the last sort's metric)
    assert first_ids() == [11]
    assert browser.find_element(By.ID, "count").text == "showing 1 of 4 images"
    Select(browser.find_element(By.ID, "who")).select_by_value("all")
    browser.find_element(By.ID, "filter").send_keys("violet")
    assert first_ids() == [13]
    browser.find_element(By.ID, "sort-original").click()
    assert (tmp_path / "report-sorted.png").stat().st_size > 10_000


def test_no_runnable_metric_is_a_clear_error(files, monkeypatch):
    from catcap.metrics.evaluate import Evaluation

    def nothing_runs(results, references, metrics, **kwargs):
        return Evaluation(list(results), unavailable={"meteor": "no Java runtime found"})

    monkeypatch.setattr("catcap.web.report.evaluate_captions", nothing_runs)
    with pytest.raises(ValueError, match=r"none of the metrics meteor could run here \(METEOR: no Java runtime found\)"):
        compute_report(files["a"], files["b"], files["refs"], split="test", metrics="meteor")


def test_a_difference_that_rounds_to_zero_prints_as_a_grey_zero_never_minus_zero():
    from catcap.web.report import _diff_class, _num

    for tiny in (-1e-17, -4.9e-5, 0.0, 3e-6):
        assert (_num(tiny, signed=True), _diff_class(tiny)) == ("0.0000", "zero")
    assert (_num(-0.00005, signed=True), _diff_class(-0.00005)) == ("-0.0001", "neg")
    assert (_num(0.25, signed=True), _diff_class(0.25)) == ("+0.2500", "pos")


def test_the_sticky_filter_bar_never_covers_the_table_headers(browser, tmp_path):
    """In a real Chromium, scrolled into the rows: the filter bar stays on top and the header row
    sits right under it, fully visible (a screenshot goes to the test's tmp folder)."""
    from caption_files import study_inputs

    f = study_inputs(tmp_path / "in", count=24)
    out = tmp_path / "report.html"
    write_report(out, f["a"], f["b"], f["refs"], split="test", images=f["images"], names="base,cat", resamples=50)
    browser.get(out.as_uri())
    browser.execute_script("window.scrollTo(0, 1500)")
    bar, head = browser.execute_script("""
        const r = (e) => { const b = e.getBoundingClientRect(); return [b.top, b.bottom]; };
        return [r(document.getElementById('controls')), r(document.querySelector('#images thead th'))];""")
    assert bar[0] == 0 and head[0] >= bar[1] - 0.5 and head[1] > head[0], (bar, head)
    assert browser.execute_script("return window.scrollY") > 1000  # the rows really scrolled under them
    browser.save_screenshot(str(tmp_path / "report-scrolled.png"))
