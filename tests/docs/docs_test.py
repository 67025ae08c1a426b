#!/usr/bin/python3
"""The operator's documentation checked against the code it documents:

- every relative link of docs/*.md and README.md names a file that exists and, for a page, a
  heading it has (GitHub's anchors);
- every `event=NAME` the daemons log (src/plugin, src/scheduler, src/monitor, and the
  inventory's health watcher they run, src/inventory) is named in the
  docs, and so is every fixed start-up failure of their main.cc (`Fail("...")`);
- every flag of hami-scheduler, hami-device-plugin and hami-monitor is in its section of
  docs/configuration.md, and so is every key the device config's and config.json's parsers
  accept;
- every metric hami-scheduler and hami-monitor export is listed in docs/observability.md, and
  every metric that page names is one they export;
- the alerting rules in docs/observability.md pass `promtool check rules` and use only exported
  metrics;
- the number of steps docs/hami-run.md gives `make demo` is the number scripts/demo.sh runs;
- every file of examples/ is a row of docs/sim-cluster.md's Examples table naming its pods, and
  each pod is one the simulated cluster can run (a command, HAMi's resource names, a core policy
  the device plugin accepts);
- (DocumentedExamplesTest, with a build) every ```console block of the docs runs as shown: each
  `$ hami ...` command against the built `hami`, its output lines and its `[exit N]` status
  (docs/build.md, "Checked examples in the docs", states the convention).

Environment: HAMI_SOURCE_DIR (the checkout; default: two levels above this file); HAMI_BIN_DIR
(the build's bin/, holding hami; DocumentedExamplesTest is skipped without it).
"""

import glob
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("HAMI_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
DOCS = os.path.join(SOURCE_DIR, "docs")
OBSERVABILITY = os.path.join(DOCS, "observability.md")
CONFIGURATION = os.path.join(DOCS, "configuration.md")
# Whose log events the docs name: the daemons' folders and src/inventory (the health watcher the
# device plugin and hami-monitor run logs its own events).
DAEMON_DIRS = ["src/plugin", "src/scheduler", "src/monitor", "src/inventory"]
METRIC_DIRS = ["src/scheduler", "src/monitor"]  # every "hami_..." literal there is a metric
# A histogram is exported as these series beside its name.
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def without_code_blocks(text):
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def pages():
    return sorted(glob.glob(os.path.join(DOCS, "*.md"))) + [os.path.join(SOURCE_DIR, "README.md")]


def all_docs_text():
    return "\n".join(read(p) for p in pages())


def anchors(path):
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to '-', repeats -1, -2."""
    out, seen = set(), {}
    for line in without_code_blocks(read(path)).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def sources(dirs):
    """The daemons' non-test C++ sources."""
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(SOURCE_DIR, d, "*.cc"))):
            name = os.path.basename(path)
            if name.endswith("_test.cc") or name.endswith("_fuzz.cc"):
                continue
            yield path


def exported_metrics():
    names = set()
    for path in sources(METRIC_DIRS):
        names.update(re.findall(r'"(hami_[a-z0-9_]+)"', read(path)))
    return names


def section(text, heading):
    """The text under `heading` (a whole heading line) up to the next heading of its level."""
    level = heading.split(" ", 1)[0]
    parts = text.split("\n" + heading + "\n", 1)
    if len(parts) != 2:
        return None
    rest = parts[1]
    m = re.search(r"^#{1,%d} " % len(level), rest, flags=re.M)
    return rest[: m.start()] if m else rest


def alert_rules_block():
    text = read(OBSERVABILITY)
    section = text.split("## Alerting rules", 1)
    if len(section) != 2:
        return None
    m = re.search(r"^```yaml\n(.*?)^```", section[1], flags=re.S | re.M)
    return m.group(1) if m else None


class DocsTest(unittest.TestCase):
    def test_every_relative_link_resolves(self):
        bad = []
        for page in pages():
            for target in re.findall(r"\]\(([^)\s]+)\)", without_code_blocks(read(page))):
                if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
                    continue
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                where = os.path.relpath(page, SOURCE_DIR)
                if not os.path.exists(dest):
                    bad.append(f"{where}: ({target}): no such file")
                elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    bad.append(f"{where}: ({target}): no heading with that anchor")
        self.assertEqual(bad, [], "broken links:\n" + "\n".join(bad))

    def test_every_logged_event_is_documented(self):
        docs = all_docs_text()
        missing = []
        for path in sources(DAEMON_DIRS):
            for name in sorted(set(re.findall(r"event=([a-z_]+)", read(path)))):
                if f"event={name}" not in docs:
                    missing.append(f"event={name} ({os.path.relpath(path, SOURCE_DIR)})")
        self.assertEqual(missing, [], "log events no page names:\n" + "\n".join(missing))

    def test_every_fixed_start_up_failure_is_documented(self):
        docs = all_docs_text()
        missing = []
        for d in DAEMON_DIRS:
            main = os.path.join(SOURCE_DIR, d, "main.cc")
            if not os.path.exists(main):
                continue
            for literal in re.findall(r'Fail\("((?:[^"\\]|\\.)*)"\)', read(main)):
                text = literal.replace('\\"', '"')
                if text.startswith("step="):  # hami-monitor prefixes the step it failed at
                    text = text.split(": ", 1)[-1]
                if text not in docs:
                    missing.append(f"{literal} ({d}/main.cc)")
        self.assertEqual(missing, [], "start-up failures no page names:\n" + "\n".join(missing))

    def test_every_daemon_flag_is_in_configuration(self):
        page = read(CONFIGURATION)
        missing = []
        for daemon, d in [("hami-scheduler", "src/scheduler"), ("hami-device-plugin", "src/plugin"),
                          ("hami-monitor", "src/monitor")]:
            main = os.path.join(SOURCE_DIR, d, "main.cc")
            if not os.path.exists(main):
                continue
            text = section(page, "### " + daemon)
            self.assertIsNotNone(text, f"docs/configuration.md has no '### {daemon}' section")
            code = read(main)
            # The logging flags every daemon takes (src/log/flags.cc), where it adds them.
            if "log::AddFlags(" in code:
                code += read(os.path.join(SOURCE_DIR, "src/log/flags.cc"))
            for flag in re.findall(r'add_(?:option|flag)\("(--[a-z0-9-]+)', code):
                if not re.search(r"`" + re.escape(flag) + r"[ `]", text):
                    missing.append(f"{daemon} {flag}")
        self.assertEqual(missing, [], "flags docs/configuration.md does not list")

    def test_every_config_key_is_in_configuration(self):
        page = read(CONFIGURATION)
        missing = []
        device = section(page, "## device-config.yaml: the `nvidia:` section")
        self.assertIsNotNone(device, "docs/configuration.md has no device-config.yaml section")
        src = read(os.path.join(SOURCE_DIR, "src/config/device_config.cc"))
        keys = set(re.findall(r'(?:name|integer|boolean|positive|ignored)\("([A-Za-z]+)"', src))
        keys |= set(re.findall(r'\{"([A-Za-z]+)", \[\]', src))
        for group in re.findall(r"for \(std::string_view key : \{([^}]*)\}", src):
            keys |= set(re.findall(r'"([A-Za-z]+)"', group))
        self.assertIn("deviceSplitCount", keys, "the device config's keys were not found")
        missing += [f"nvidia.{k}" for k in sorted(keys) if f"`{k}`" not in device]
        node = section(page, "## config.json: per-node overrides")
        self.assertIsNotNone(node, "docs/configuration.md has no config.json section")
        src = read(os.path.join(SOURCE_DIR, "src/plugin/config.cc"))
        keys = set(re.findall(r'[hf]\.emplace_back\("([a-z]+)"', src))
        self.assertIn("devicesplitcount", keys, "config.json's keys were not found")
        missing += [f"config.json {k}" for k in sorted(keys)
                    if not any(form in node for form in (f"`{k}`", f".{k}`", f"`{k}."))]
        self.assertEqual(missing, [], "configuration keys docs/configuration.md does not list")

    def test_every_exported_metric_is_in_observability(self):
        page = read(OBSERVABILITY)
        missing = sorted(m for m in exported_metrics() if f"`{m}`" not in page)
        self.assertEqual(missing, [], "metrics docs/observability.md does not list")

    def test_every_metric_observability_names_is_exported(self):
        exported = exported_metrics()
        named = set(re.findall(r"`(hami_[a-z0-9_]+)`", without_code_blocks(read(OBSERVABILITY))))
        stale = sorted(m for m in named if m not in exported)
        self.assertEqual(stale, [], "docs/observability.md names metrics nothing exports")

    def test_alert_rules_use_exported_metrics(self):
        block = alert_rules_block()
        self.assertIsNotNone(block, "docs/observability.md has no ```yaml block under Alerting rules")
        exported = exported_metrics()
        used = set()
        for expr in re.findall(r"expr: \|?\s*\n?((?:.*\n)*?)\s*(?:for|labels):", block):
            used.update(re.findall(r"\b(hami_[a-z0-9_]+)", expr))
        self.assertTrue(used, "no metric found in the rules' expressions")
        unknown = sorted(m for m in used if m not in exported
                         and not m.endswith(HISTOGRAM_SUFFIXES))
        self.assertEqual(unknown, [], "alerting rules use metrics nothing exports")

    def test_alert_rules_pass_promtool(self):
        promtool = shutil.which("promtool")
        if promtool is None:
            self.skipTest("promtool not installed (Debian package prometheus; scripts/setup.sh "
                          "installs it)")
        block = alert_rules_block()
        self.assertIsNotNone(block)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write(block)
            f.flush()
            run = subprocess.run([promtool, "check", "rules", f.name], capture_output=True,
                                 text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)


NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                "ten", "eleven", "twelve"]


class DemoStepsTest(unittest.TestCase):
    def test_hami_run_md_gives_the_demo_its_number_of_steps(self):
        script = read(os.path.join(SOURCE_DIR, "scripts/demo.sh"))
        steps = sorted({int(n) for n in re.findall(r'^\s*(?:step "|echo "== )(\d+)\.', script,
                                                      flags=re.M)})
        self.assertTrue(steps, "no numbered step found in scripts/demo.sh")
        self.assertEqual(steps, list(range(1, len(steps) + 1)), "the demo's steps are not 1..N")
        page = read(os.path.join(DOCS, "hami-run.md"))
        m = re.search(r"`make demo` runs (\w+) steps", page)
        self.assertIsNotNone(m, "docs/hami-run.md does not say how many steps `make demo` runs")
        self.assertEqual(m.group(1), NUMBER_WORDS[len(steps)],
                         f"scripts/demo.sh runs {len(steps)} steps")


# What a container of an example may ask for: HAMi's resources, the kubelet's own.
EXAMPLE_RESOURCES = {"nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
                     "nvidia.com/gpucores", "nvidia.com/priority", "cpu", "memory"}


class ExampleFilesTest(unittest.TestCase):
    def test_every_example_is_listed_with_its_pods_and_runs_on_the_simulated_cluster(self):
        try:
            import yaml
        except ImportError:
            self.skipTest("python3-yaml is not installed (scripts/setup.sh installs it)")
        table = section(read(os.path.join(DOCS, "sim-cluster.md")), "## Examples")
        self.assertIsNotNone(table, "docs/sim-cluster.md has no Examples section")
        rows = [line for line in table.splitlines() if line.startswith("| `examples/")]
        files = sorted(glob.glob(os.path.join(SOURCE_DIR, "examples", "*.yaml")))
        self.assertTrue(files, "examples/ holds no .yaml file")
        for path in files:
            name = "examples/" + os.path.basename(path)
            with self.subTest(example=name):
                row = next((r for r in rows if f"`{name}`" in r.split("|")[1]), None)
                self.assertIsNotNone(row, f"{name} is not a row of docs/sim-cluster.md's Examples")
                pods = [d for d in yaml.safe_load_all(read(path)) if d]
                self.assertTrue(pods, f"{name} holds no object")
                for pod in pods:
                    self.assertEqual((pod.get("apiVersion"), pod.get("kind")), ("v1", "Pod"))
                    pod_name = pod["metadata"]["name"]
                    self.assertIn(f"`{pod_name}`", row.split("|")[2],
                                  f"{name}: its row does not name pod {pod_name}")
                    for c in pod["spec"]["containers"]:
                        where = f"{name}: pod {pod_name} container {c['name']}"
                        self.assertTrue(c.get("command"),
                                        f"{where}: no command (the simulated kubelet has no "
                                        "image entrypoints)")
                        limits = c.get("resources", {}).get("limits", {})
                        self.assertLessEqual(set(limits), EXAMPLE_RESOURCES, where)
                        if "nvidia.com/gpucores" in limits:
                            self.assertIn(int(limits["nvidia.com/gpucores"]), range(0, 101), where)
                        for e in c.get("env", []):
                            if e["name"] == "GPU_CORE_UTILIZATION_POLICY":
                                self.assertIn(str(e.get("value", "")).lower(),
                                              ("default", "force", "disable"), where)


# A documented example: a command, the lines its output must hold, its exit status.
class Example:
    def __init__(self, page, line, command):
        self.page, self.line, self.command = page, line, command
        self.expected = []
        self.status = None

    def where(self):
        return f"{os.path.relpath(self.page, SOURCE_DIR)}:{self.line}: $ {self.command}"


def console_blocks(page):
    """(line number of the first line, lines) of every ```console block of `page`; a block
    shown inside a longer fence (````) is text, not an example."""
    lines = read(page).split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = re.match(r"^(`{3,})\s*(\S*)", lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2)
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            j += 1
        if fence == "```" and info == "console":
            blocks.append((i + 2, lines[i + 1:j]))
        i = j + 1
    return blocks


def parse_block(page, first, lines):
    """The block's steps, in order: ("file", name, text) for `$ cat NAME` and its lines,
    ("run", Example) for a command; and the problems found in its form."""
    steps, problems, i = [], [], 0
    while i < len(lines):
        number, line = first + i, lines[i]
        if not line.startswith("$ "):
            problems.append(f"{os.path.relpath(page, SOURCE_DIR)}:{number}: a line outside an "
                            f"example (an example starts with '$ '): {line!r}")
            i += 1
            continue
        command = line[2:]
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith("$ ") and \
                not re.fullmatch(r"\[exit \d+\]", lines[i]):
            body.append(lines[i])
            i += 1
        words = shlex.split(command)
        if len(words) == 2 and words[0] == "cat":
            steps.append(("file", words[1], "\n".join(body) + "\n"))
            continue
        example = Example(page, number, command)
        example.expected = [b for b in body if b.strip()]
        if i < len(lines) and lines[i].startswith("[exit "):
            example.status = int(lines[i][len("[exit "):-1])
            i += 1
        else:
            problems.append(f"{example.where()}: no [exit N] line after its output")
        steps.append(("run", example))
    return steps, problems


def line_pattern(expected):
    """A documented output line as a regular expression: `...` stands for any text."""
    return re.compile(".*".join(re.escape(part) for part in expected.split("...")))


class DocumentedExamplesTest(unittest.TestCase):
    """Every ```console block in docs/*.md and README.md, run against the built hami."""

    def setUp(self):
        bin_dir = os.environ.get("HAMI_BIN_DIR")
        if not bin_dir:
            self.skipTest("HAMI_BIN_DIR is not set (CTest's docs.examples sets it to the build's "
                          "bin/)")
        self.hami = os.path.join(os.path.abspath(bin_dir), "hami")
        self.assertTrue(os.access(self.hami, os.X_OK), f"{self.hami} is not built")

    def run_example(self, example, cwd):
        words = shlex.split(example.command)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": cwd, "XDG_RUNTIME_DIR": cwd,
               "HAMI_SIM_STATE": os.path.join(cwd, "sim.state"), "LANG": "C.UTF-8"}
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        if words[:1] == ["sudo"]:
            if os.geteuid() != 0:
                return f"{example.where()}: skipped (needs root)"
            words.pop(0)
        if words[:1] != ["hami"]:
            self.fail(f"{example.where()}: only `hami` commands are checked; write other "
                      "commands in a ```sh block")
        run = subprocess.run([self.hami] + words[1:], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             errors="replace", timeout=60)
        got = run.stdout.split("\n")
        bad = []
        if run.returncode != example.status:
            bad.append(f"exit status {run.returncode}, documented {example.status}")
        for expected in example.expected:
            pattern = line_pattern(expected)
            if not any(pattern.fullmatch(g) for g in got):
                bad.append(f"no line {expected!r}")
        if bad:
            return (f"{example.where()}:\n  " + "\n  ".join(bad) + "\n  its output:\n    " +
                    "\n    ".join(got))
        return None

    def test_every_console_example_runs_as_documented(self):
        failures, skipped, checked = [], [], 0
        for page in pages():
            for first, lines in console_blocks(page):
                steps, problems = parse_block(page, first, lines)
                failures += problems
                # One scratch directory per block: its files and relative paths live there.
                with tempfile.TemporaryDirectory(prefix="hami-docs-") as cwd:
                    for step in steps:
                        if step[0] == "file":
                            with open(os.path.join(cwd, step[1]), "w", encoding="utf-8") as f:
                                f.write(step[2])
                            continue
                        example = step[1]
                        if example.status is None:
                            continue
                        outcome = self.run_example(example, cwd)
                        checked += 1
                        if outcome and outcome.endswith("skipped (needs root)"):
                            skipped.append(outcome)
                        elif outcome:
                            failures.append(outcome)
        self.assertGreater(checked, 0, "no ```console example found in the docs")
        for s in skipped:
            print(s)
        if failures:
            self.fail("examples the binary does not bear out:\n" + "\n".join(failures))


if __name__ == "__main__":
    unittest.main(verbosity=2)
