"""The HTML report in a real headless browser: Debian's Chromium through selenium.

Runs the oracle, no-clarify and random agents on the embedded set (48 samples each), builds the report,
opens it in headless Chromium and checks that the inline SVG charts render (present, non-zero size, with
drawn paths), that nothing is fetched (no resource entries, the Content-Security-Policy lets the page's
script run), that the dialogue filter shows exactly the rows the trajectories say, and that hostile agent
text stays text. Screenshots go to ``tests/artifacts/`` (git-ignored): ``report.png`` (the top of the page),
``report_full.png`` (the whole page, cut at Chromium's 16,384 px) and ``report_dialogues.png`` (the browser
filtered to the random agent's failed ambiguous episodes, one opened).

Skips with the reason when chromium, chromedriver or selenium is absent (CI installs Debian's ``chromium``
and ``chromium-driver``). Selenium Manager is never asked for a driver: the driver's path is given, and the
test makes Selenium Manager raise if it were called.
"""
from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.datasets import load_dataset
from textsql_clarify.reports import write_report

pytestmark = pytest.mark.browser

AGENTS = ("oracle", "no-clarify", "random")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
PAYLOAD = "</script><img src=x onerror=alert(1)>"


def _tools() -> tuple[str, str]:
    """(browser, driver) paths, or skip with the reason."""
    pytest.importorskip("selenium", reason="selenium is not installed (the 'test' extra)")
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the 'report' extra)")
    browser = next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        missing = " and ".join(n for n, p in (("chromium", browser), ("chromedriver", driver)) if p is None)
        pytest.skip(f"no headless browser: {missing} not found on PATH (apt-get install chromium chromium-driver)")
    return browser, driver


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The three runs, a report over them, and a report of one run with hostile agent text."""
    tools = _tools()
    root = tmp_path_factory.mktemp("browser_runs")
    samples = load_dataset("embedded")
    for agent in AGENTS:
        evaluate(samples, agent, out_dir=root / agent, progress=False, dataset="embedded")
    report = write_report([root / a for a in AGENTS], root / "report.html")
    hostile = root / "hostile"
    shutil.copytree(root / "no-clarify", hostile)
    recs = [json.loads(x) for x in (hostile / "trajectories.jsonl").read_text().splitlines()]
    recs[0]["turns"][0]["content"] = PAYLOAD
    recs[0]["question"] = '<img src=y onerror="document.title=\'pwned\'">'
    (hostile / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    hostile_report = write_report([hostile], root / "hostile.html")
    trajs = {a: [json.loads(x) for x in (root / a / "trajectories.jsonl").read_text().splitlines()] for a in AGENTS}
    return {"tools": tools, "report": report, "hostile": hostile_report, "trajs": trajs, "root": root}


@pytest.fixture(scope="module")
def driver(built, tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common import selenium_manager

    browser, chromedriver = built["tools"]

    def no_manager(*_a, **_k):
        raise AssertionError("Selenium Manager was asked for a driver; the test gives the driver's path")

    mp = pytest.MonkeyPatch()
    mp.setenv("SE_OFFLINE", "true")
    mp.setattr(selenium_manager.SeleniumManager, "binary_paths", no_manager)
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                "--window-size=1400,1000", f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(arg)
    try:
        d = webdriver.Chrome(service=Service(chromedriver), options=opts)
    except Exception as e:  # noqa: BLE001 - a browser that cannot start here is a skip, with its reason
        mp.undo()
        pytest.skip(f"headless chromium did not start: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    d.set_page_load_timeout(60)
    try:
        yield d
    finally:
        d.quit()
        mp.undo()


def _visible(d) -> int:
    return d.execute_script("return Array.from(document.querySelectorAll('#dialogues details.episode'))"
                            ".filter(function (e) { return e.getClientRects().length > 0; }).length")


def _select(d, name: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(d.find_element("css selector", f'#dlg-filters select[name="{name}"]')).select_by_value(value)


def _reset(d) -> None:
    """Click the form's reset and wait for the filter to run (the page applies it on the next task, after the
    browser has reset the fields)."""
    from selenium.webdriver.support.ui import WebDriverWait

    d.find_element("css selector", '#dlg-filters button[type="reset"]').click()
    WebDriverWait(d, 10).until(lambda drv: drv.find_element("id", "dlg-count").get_attribute("data-shown")
                               == str(drv.execute_script("return document.querySelectorAll("
                                                         "'#dialogues details.episode').length")))


def test_report_renders_filters_and_keeps_screenshots(built, driver):
    d = driver
    d.get(built["report"].resolve().as_uri())
    assert d.title == "textsql-clarify report: oracle, no-clarify, random"
    # nothing fetched: no resource entry at all (fonts, images, scripts), and the page's own script ran
    assert d.execute_script("return performance.getEntriesByType('resource').length") == 0
    assert d.find_element("id", "dlg-count").text == "144 of 144 episodes shown"

    # the charts: 16 inline SVGs (8 metrics by group, 8 by subcategory), each laid out with a size and bars
    charts = d.execute_script(
        "return Array.from(document.querySelectorAll('figure.plot svg.chart')).map(function (s) {"
        " var r = s.getBoundingClientRect(); return [r.width, r.height, s.querySelectorAll('path').length,"
        " s.closest('figure').dataset.by + ':' + s.closest('figure').dataset.metric]; })")
    assert len(charts) == 16
    assert all(w > 200 and h > 100 and paths > 0 for w, h, paths, _ in charts), charts
    assert {c[3] for c in charts} >= {"group:EX", "group:FB", "subcategory:EX", "subcategory:AR"}

    ARTIFACTS.mkdir(exist_ok=True)
    d.save_screenshot(str(ARTIFACTS / "report.png"))

    # the dialogue filter: counts straight from the trajectories
    trajs = built["trajs"]
    assert _visible(d) == 144
    _select(d, "run", "r2")  # random
    assert _visible(d) == len(trajs["random"]) == 48
    _select(d, "score", "ex:fail")
    want = sum(1 for t in trajs["random"] if t["scores"]["ex"] == 0)
    assert want == 45 and _visible(d) == want
    _select(d, "group", "ambiguous")
    want = sum(1 for t in trajs["random"] if t["scores"]["ex"] == 0 and t["group"] == "ambiguous")
    assert want == 24 and _visible(d) == want
    assert d.find_element("id", "dlg-count").text == f"{want} of 144 episodes shown"
    # open one shown episode with a clarification: its turns show the user's relevancy label and components
    first = d.execute_script(
        "return Array.from(document.querySelectorAll('#dialogues details.episode')).find(function (e) {"
        " return e.getClientRects().length > 0 && e.querySelector('.reply .label'); })")
    d.execute_script("arguments[0].open = true; arguments[0].scrollIntoView();", first)
    label = first.find_element("css selector", ".reply .label")
    assert label.is_displayed() and label.text.lower() in ("relevant", "technical", "irrelevant")
    comps = first.find_elements("css selector", "li.turn .comps .comp")
    assert comps and comps[0].is_displayed() and comps[0].size["width"] > 0
    assert first.find_element("css selector", ".question").text.startswith("Question: ")
    d.execute_script("document.getElementById('dialogues').scrollIntoView();")
    d.save_screenshot(str(ARTIFACTS / "report_dialogues.png"))

    _reset(d)
    assert _visible(d) == 144
    _select(d, "outcome", "feedback")
    want = sum(1 for a in AGENTS for t in trajs[a] if t["outcome"] == "feedback")
    assert want == 12 + 12 + 26 and _visible(d) == want
    _select(d, "outcome", "")
    _select(d, "run", "r0")
    _select(d, "subcategory", "scope")
    assert _visible(d) == Counter(t["subcategory"] for t in trajs["oracle"])["scope"] == 3
    box = d.find_element("css selector", '#dlg-filters input[name="text"]')
    box.send_keys("uni-scope-002")
    assert _visible(d) == 1
    _reset(d)
    assert _visible(d) == 144

    # the whole page (Chromium caps a screenshot at 16,384 px)
    height = min(int(d.execute_script("return document.documentElement.scrollHeight")), 16384)
    d.set_window_size(1400, height)
    d.execute_script("window.scrollTo(0, 0)")
    d.save_screenshot(str(ARTIFACTS / "report_full.png"))
    d.set_window_size(1400, 1000)
    for name in ("report.png", "report_full.png", "report_dialogues.png"):
        assert (ARTIFACTS / name).stat().st_size > 10_000


def test_hostile_agent_text_stays_text_in_the_browser(built, driver):
    d = driver
    d.get(built["hostile"].resolve().as_uri())
    assert d.execute_script("return document.querySelectorAll('img').length") == 0
    assert d.title.startswith("textsql-clarify report") and d.title != "pwned"
    first = d.find_element("css selector", "#dialogues details.episode")
    d.execute_script("arguments[0].open = true;", first)
    assert first.find_element("css selector", "pre.sql").text == PAYLOAD
    assert "<img src=y" in first.find_element("css selector", ".question").text
    assert d.find_element("id", "dlg-count").text == "48 of 48 episodes shown"  # the page's script still ran


def _episode(d, run: str, sample_id: str):
    """The ``<details class="episode">`` of ``sample_id`` in run ``run`` (``r0``, ``r1`` ...), opened."""
    from selenium.webdriver.support.ui import WebDriverWait

    def find(drv):
        for ep in drv.find_elements("css selector", f'#dialogues details.episode[data-run="{run}"]'):
            if ep.find_element("css selector", "summary code").get_attribute("textContent") == sample_id:
                return ep
        return False

    ep = WebDriverWait(d, 10).until(find, message=f"no episode of {sample_id} in run {run}")
    d.execute_script("arguments[0].open = true; arguments[0].scrollIntoView();", ep)
    return ep


def test_expected_answer_opens_behind_its_toggle(built, driver):
    """The no-clarify run answers the personal-email reading of uni-overlap-001; its episode's 'expected' toggle shows
    the dataset's gold (institutional_email), the hidden knowledge and the personal-email reading as the other one."""
    d = driver
    d.get(built["report"].resolve().as_uri())
    sample = next(s for s in load_dataset("embedded") if s.id == "uni-overlap-001")
    assert "institutional_email" in sample.gold_sql and "personal_email" in sample.interpretations[0].gold_sql
    ep = _episode(d, "r1", "uni-overlap-001")  # no-clarify
    assert ep.find_element("css selector", "li.turn pre.sql").text == sample.interpretations[0].gold_sql
    toggle = ep.find_element("css selector", "details.expected")
    gold = toggle.find_element("css selector", "pre.gold")
    assert toggle.get_attribute("open") is None and not gold.is_displayed()  # closed until asked
    toggle.find_element("css selector", "summary").click()
    assert toggle.get_attribute("open") is not None and gold.is_displayed()
    assert gold.text == sample.gold_sql
    body = toggle.find_element("css selector", ".expected-body").text
    assert sample.hidden_knowledge in body and "flags: none" in body
    readings = toggle.find_elements("css selector", "li.reading")
    assert len(readings) == len(sample.interpretations) == 1
    assert readings[0].find_element("css selector", "pre.alt").text == sample.interpretations[0].gold_sql
    assert sample.interpretations[0].hidden_knowledge in readings[0].text

    # a drift sample: the post-drift gold beside the first gold
    drift = next(s for s in load_dataset("embedded") if s.drift is not None)
    ep = _episode(d, "r0", drift.id)
    toggle = ep.find_element("css selector", "details.expected")
    toggle.find_element("css selector", "summary").click()
    golds = [p.text for p in toggle.find_elements("css selector", "pre.gold")]
    assert golds == [drift.gold_sql, drift.drift.post_gold_sql]
    assert drift.drift.utterance in toggle.text


def test_headline_chips_first_and_the_rest_folded(built, driver):
    """A SQL turn shows its reward, EX and decision; its other components sit in a closed 'more' group whose count
    is what the trajectory records beyond those."""
    d = driver
    d.get(built["report"].resolve().as_uri())
    rec = next(t for t in built["trajs"]["no-clarify"] if t["sample_id"] == "uni-overlap-001")
    comps = rec["turns"][0]["reward_components"]

    def leaves(node, prefix=""):
        return [x for k, v in node.items()
                for x in (leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"])]

    names = leaves(comps)
    headline = [k for k in ("reward", "ex", "ex_post", "fb", "decision") if k == "reward" or k in names]
    assert headline == ["reward", "ex", "decision"] and len(names) > 20
    ep = _episode(d, "r1", "uni-overlap-001")
    turn = ep.find_element("css selector", "li.turn")
    shown = [c.get_attribute("data-key") for c in turn.find_elements("css selector", ":scope > .comps > .comp")]
    assert shown == headline
    assert all(c.is_displayed() for c in turn.find_elements("css selector", ":scope > .comps > .comp"))
    more = turn.find_element("css selector", "details.more-comps")
    assert more.get_attribute("open") is None
    folded = more.find_elements("css selector", ".comp")
    assert len(folded) == len(names) - 2 and not any(c.is_displayed() for c in folded)  # ex and decision are headline
    assert more.find_element("css selector", "summary").text == f"{len(names) - 2} more"
    more.find_element("css selector", "summary").click()
    assert all(c.is_displayed() for c in folded)
    # the final scores: EX, EX_post, FB, decision first
    final = ep.find_element("css selector", ".final")
    shown = [c.get_attribute("data-key") for c in final.find_elements("css selector", ":scope > .comps > .comp")]
    assert shown == [k for k in ("ex", "ex_post", "fb", "decision") if k in rec["scores"]]
    assert final.find_element("css selector", "details.more-comps").get_attribute("open") is None


def test_wide_tables_scroll_in_their_own_box_with_a_fixed_first_column(built, driver):
    """The page never scrolls sideways at 1,400 px; the per-category tables (wider than their box) scroll inside it,
    and their first column stays at the box's left edge when scrolled."""
    d = driver
    d.get(built["report"].resolve().as_uri())
    d.execute_script("document.querySelectorAll('details').forEach(function (e) { e.open = true; });")
    page = d.execute_script("var e = document.documentElement; return [e.scrollWidth, e.clientWidth]")
    assert page[0] <= page[1], page
    boxes = d.execute_script(
        "return Array.from(document.querySelectorAll('table.category')).map(function (t) {"
        " var box = t.closest('.scroll'); return [box.scrollWidth, box.clientWidth]; })")
    assert boxes and any(sw > cw for sw, cw in boxes), boxes  # at least one is wider than its box
    moved = d.execute_script(
        "var t = Array.from(document.querySelectorAll('table.category')).find(function (t) {"
        " var b = t.closest('.scroll'); return b.scrollWidth > b.clientWidth; });"
        "var box = t.closest('.scroll'); box.scrollLeft = 400;"
        "var key = t.querySelector('td.key'), head = t.querySelector('th.key'), other = t.querySelector('td.num');"
        "return [box.scrollLeft, key.getBoundingClientRect().left - box.getBoundingClientRect().left,"
        " head.getBoundingClientRect().left - box.getBoundingClientRect().left,"
        " other.getBoundingClientRect().left - box.getBoundingClientRect().left];")
    assert moved[0] == 400 and abs(moved[1]) < 1 and abs(moved[2]) < 1, moved
    assert moved[3] < 0 or moved[3] > 0  # a number cell moved with the scroll (not pinned)
