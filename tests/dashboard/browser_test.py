"""The dashboard in a real browser (Debian's chromium and chromium-driver, driven by
Selenium) against a real lathed with two real workers and a running job: no token is refused,
the login form lets the token in, the page lists both workers, the job's progress moves while
the test watches, a killed worker turns lost, cancel works. Screenshots (light and dark) are
saved to $LATHE_SCREENSHOTS (CTest: build/dashboard-screenshots). CTest label `e2e`.
Skips, saying why, without selenium, chromium or chromedriver."""

import os
import shutil
import json
import signal
import subprocess
import tempfile
import time

import pytest

import lathe
from fleet import TOKEN, Daemon

webdriver = pytest.importorskip("selenium.webdriver", reason="python3-selenium is not installed")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
WORKLOAD = "matmul:m=64,n=64,k=64"
SECOND = "matmul:m=32,n=128,k=64"


@pytest.fixture(scope="module")
def shots():
    out = os.environ.get("LATHE_SCREENSHOTS") or tempfile.mkdtemp(prefix="lathe_shots_")
    os.makedirs(out, exist_ok=True)
    return out


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM or not os.path.exists(CHROMEDRIVER):
        pytest.skip("chromium or chromedriver is not installed (Debian: chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    # A laptop-sized window; root (CI containers) needs --no-sandbox.
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1440,900", "--disable-extensions", "--no-first-run"):
        o.add_argument(a)
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=o)
    d.set_page_load_timeout(30)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def fleet():
    workdir = tempfile.mkdtemp(prefix="lathe_browser_")
    # The library's figure for WORKLOAD on this machine, as `lathe tune --json` measures it
    # (OpenBLAS, when this build has the baselines): the curve draws it.
    figures = os.path.join(workdir, "figures.jsonl")
    with open(figures, "w") as f:
        lathe_bin = os.environ.get("LATHE_BIN")
        if lathe_bin:
            r = subprocess.run([lathe_bin, "tune", "--workload", WORKLOAD, "--trials", "1",
                                "--db", os.path.join(workdir, "embedded.db"), "--json"],
                               capture_output=True, text=True, timeout=120)
            f.write(r.stdout)
    d = Daemon(workdir, extra=["--http", "127.0.0.1:0", "--library-figures", figures])
    workers = [d.start_worker(0), d.start_worker(1)]
    yield d, workers
    d.stop()
    shutil.rmtree(workdir, ignore_errors=True)


def wait(driver, what, fn, timeout=30):
    """Waits until fn(driver) is truthy; the failure names what was awaited. The page redraws
    every second, so an element may go stale between finding and reading it: try again."""
    return WebDriverWait(driver, timeout, poll_frequency=0.2,
                         ignored_exceptions=[StaleElementReferenceException]).until(fn, message=what)


def workers_on_page(driver):
    """[(worker id, state)] of the workers table, read in one go."""
    return driver.execute_script(
        "return [...document.querySelectorAll('#workers tbody tr[data-worker]')]"
        ".map(r => [r.dataset.worker, r.dataset.state])")


def job_on_page(driver, job_id, attr):
    """An attribute (data-*) of the job's card, or None while it is not drawn."""
    return driver.execute_script(
        "const e = document.querySelector(`article.job[data-job='${arguments[0]}']`);"
        "return e ? e.dataset[arguments[1]] : null", job_id, attr)


def text_of(driver, css):
    return driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : ''", css)


def scheme(driver, name):
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                           {"features": [{"name": "prefers-color-scheme", "value": name}]})


def test_dashboard_in_a_browser(browser, fleet, shots):
    d, workers = fleet
    b = browser

    # No token: the page answers with the login form and nothing of the fleet.
    b.get(d.url + "/")
    assert b.find_elements(By.ID, "token"), "no login form without the token"
    assert not b.find_elements(By.ID, "jobs")
    assert "app.js" not in b.page_source
    b.get(d.url + "/api/state")
    assert "unauthenticated" in b.page_source and "workers" not in b.page_source
    b.get(d.url + "/login")
    b.find_element(By.ID, "token").send_keys("not-the-token")
    b.find_element(By.ID, "login").click()
    wait(b, "the wrong token refused", lambda x: "wrong token" in x.find_element(By.ID, "message").text)
    scheme(b, "light")
    b.save_screenshot(os.path.join(shots, "login-refused.png"))

    # A job with far more trials than the test lasts, measured by both workers.
    client = lathe.Client(d.address, token=TOKEN, timeout=20)
    # Two weighted tasks sharing one budget (each kernel's weight: how often it runs).
    job = client.submit({WORKLOAD: 2.0, SECOND: 1.0}, trials=5000, batch=4, min_repeat_ms=5,
                        seed=1)

    b.find_element(By.ID, "token").send_keys(TOKEN)
    b.find_element(By.ID, "login").click()
    wait(b, "the dashboard after login", lambda x: x.find_elements(By.ID, "jobs"))

    # Both workers are listed, and the job measures.
    wait(b, "two workers listed", lambda x: len(workers_on_page(x)) == 2)
    ids = {w.id for w in client.workers()}
    assert {w for w, _ in workers_on_page(b)} == ids
    card = f'article.job[data-job="{job.id}"]'
    done = lambda x: int(job_on_page(x, job.id, "done") or -1)  # noqa: E731
    wait(b, "the job's first trials", lambda x: done(x) >= 4, timeout=60)
    first = done(b)
    wait(b, "the job's progress moving", lambda x: done(x) > first, timeout=60)
    assert done(b) <= 5000
    text = text_of(b, card)
    assert "tuning" in text and "trials" in text, text
    # The curve and the best record of the task (selected by default).
    wait(b, "the tuning curve", lambda x: x.find_elements(By.CSS_SELECTOR, f"{card} .chart svg path.curve"))
    wait(b, "the best record", lambda x: "best ok record" in text_of(x, f"{card} .record"))
    with open(os.path.join(d.dir, "figures.jsonl")) as f:
        measured = [json.loads(line) for line in f if line.strip().startswith("{")]
    if any(m.get("library_gflops") for m in measured):
        wait(b, "the library's line on the curve",
             lambda x: x.find_elements(By.CSS_SELECTOR, f"{card} .chart svg line.lib"))
    assert "2" in text_of(b, f"{card} tr.task[data-task='0'] td:nth-child(2)")  # its weight
    # A model's job in view: once both tasks have a best, each task's share of the objective,
    # and the objective's fall as a line once it has changed.
    share = lambda x, i: text_of(x, f"{card} tr.task[data-task='{i}'] td:nth-child(5)")  # noqa: E731
    wait(b, "the tasks' shares of the objective",
         lambda x: share(x, 0).endswith("%") and share(x, 1).endswith("%"), timeout=60)
    total = float(share(b, 0)[:-1]) + float(share(b, 1)[:-1])
    assert abs(total - 100) < 0.2, (share(b, 0), share(b, 1))
    wait(b, "the objective's line", lambda x: x.find_elements(By.CSS_SELECTOR, f"{card} svg.spark polyline"),
         timeout=60)
    # The model in view: the objective over time above the task table, a dot per point of the
    # daemon's history, and how far it fell.
    chart = f"{card} .objective-chart"
    wait(b, "the objective's chart over time",
         lambda x: len(x.find_elements(By.CSS_SELECTOR, f"{chart} svg circle.dot")) >= 2, timeout=60)
    chart_text = text_of(b, chart)
    assert "since the job was created" in chart_text and "% lower" in chart_text, chart_text
    assert b.find_elements(By.CSS_SELECTOR, f"{chart} svg path.objective")
    time.sleep(5.5)  # more trials, and the trials/min behind the estimate of the time left
    assert text_of(b, f"{card} .eta") not in ("", "estimating…"), text_of(b, card)
    b.save_screenshot(os.path.join(shots, "dashboard-light.png"))
    scheme(b, "dark")
    time.sleep(0.5)
    b.save_screenshot(os.path.join(shots, "dashboard-dark.png"))
    scheme(b, "light")
    # The whole page at once (README's screenshot), then back to a laptop's window.
    height = b.execute_script("return document.documentElement.scrollHeight")
    b.set_window_size(1440, min(max(height + 120, 900), 3000))
    time.sleep(0.5)
    b.save_screenshot(os.path.join(shots, "dashboard-full.png"))
    b.set_window_size(1440, 900)

    # A killed worker turns lost (3 heartbeats of 500 ms unseen), the other stays.
    before = {w.id for w in client.workers()}
    workers[1].send_signal(signal.SIGKILL)
    workers[1].wait()
    lost = lambda x: [w for w, state in workers_on_page(x) if state == "lost"]  # noqa: E731
    wait(b, "the killed worker turning lost", lambda x: len(lost(x)) == 1, timeout=30)
    victim_id = lost(b)[0]
    assert victim_id in before
    assert [w.state for w in client.workers() if w.id == victim_id] == ["lost"]
    assert len([w for w, state in workers_on_page(b) if state != "lost"]) == 1
    b.execute_script("document.querySelector('#workers').scrollIntoView()")
    b.save_screenshot(os.path.join(shots, "worker-lost.png"))

    # Cancel from the page (after its confirmation dialog).
    b.execute_script("window.scrollTo(0, 0)")
    wait(b, "the cancel button", lambda x: x.execute_script(
        # Clicked after the script returns: the click opens a confirm() dialog.
        "const e = document.querySelector(arguments[0]); if (e) setTimeout(() => e.click(), 0);"
        "return !!e;",
        f"{card} button.cancel"))
    wait(b, "the confirmation", lambda x: x.switch_to.alert)
    b.switch_to.alert.accept()
    wait(b, "the job cancelled on the page", lambda x: job_on_page(x, job.id, "state") == "cancelled")
    assert job.status().state == "cancelled"
    assert not b.find_elements(By.CSS_SELECTOR, f"{card} button.cancel")
    b.save_screenshot(os.path.join(shots, "job-cancelled.png"))

    # Look up a best record by its spec, written in another key order.
    b.find_element(By.ID, "lookup-workload").send_keys("matmul:k=64,n=64,m=64")
    b.find_element(By.CSS_SELECTOR, "#lookup button").click()
    wait(b, "the looked-up record", lambda x: "best ok record" in text_of(x, "#lookup-result"))

    # The page drew without errors, and quickly.
    stats = b.execute_script("return window.latheStats")
    assert stats["renders"] > 3
    print(f"\nrenders {stats['renders']}, the slowest {stats['maxRenderMs']:.1f} ms; "
          f"screenshots in {shots}")
    severe = [e for e in b.get_log("browser") if e.get("level") == "SEVERE"
              and "401" not in e.get("message", "")]
    assert not severe, severe
