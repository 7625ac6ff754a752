"""Renders an HTML report in headless Chromium and reports what the browser saw.

The report is loaded in an iframe of a small page whose script, once the frame has loaded, lists
each image with whether the browser decoded it (`complete` and a natural width); Chromium's
`--dump-dom` prints that page after its virtual time runs out. `make test` installs Chromium
where it can (the Debian `chromium` package); elsewhere `render` returns None and callers skip.
"""
import json
import pathlib
import re
import shutil
import subprocess
import tempfile

PAGE = """<!DOCTYPE html><html><body><pre id="seen">not loaded</pre>
<iframe id="report" src="{src}" width="1280" height="900"></iframe>
<script>
document.getElementById('report').addEventListener('load', () => {{
  const doc = document.getElementById('report').contentDocument;
  const images = [...doc.images].map(i => ({{src: i.getAttribute('src'),
                                            shown: i.complete && i.naturalWidth > 0}}));
  document.getElementById('seen').textContent = JSON.stringify(
      {{title: doc.title, headings: doc.querySelectorAll('h1, h2').length, images: images}});
}});
</script></body></html>"""


def chromium() -> str | None:
  return shutil.which("chromium") or shutil.which("chromium-browser")


def render(report: pathlib.Path) -> dict | None:
  """{"title", "headings", "images": [{"src", "shown"}], "errors": [console errors]} or None
  when no Chromium is installed."""
  binary = chromium()
  if binary is None:
    return None
  with tempfile.TemporaryDirectory() as folder:
    page = pathlib.Path(folder) / "page.html"
    page.write_text(PAGE.format(src=report.resolve().as_uri()))
    done = subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
  seen = re.search(r'<pre id="seen">(.*?)</pre>', done.stdout, re.S)
  assert seen and seen.group(1) != "not loaded", f"the report did not load:\n{done.stderr[-2000:]}"
  result = json.loads(seen.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
  # The page's own console errors (a missing file, a script error); Chromium's D-Bus noise is not.
  result["errors"] = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Failed to load" in line]
  return result
