#!/usr/bin/env python3
"""Writes alerts/tests/quiet.test.yml from tests/docs/fixtures/quiet-scrape.prom.

The fixture is one real scrape of the exporter with default flags (only
--monitor-url and --listen set) watching a healthy nats-server: a stream,
a consumer that has acknowledged everything. The test holds every series of
it at its value for an hour, with the exporter's target up, and expects
every alert in alerts/*.rules.yml silent at 30 and 60 minutes. Run from
anywhere after changing the rules or the fixture:
    python3 scripts/alert-quiet-test.py
Needs PyYAML. tests/docs/alert_policy.rs checks the two stay in step.
"""
import glob
import os

import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TARGET = 'job="nats-delivery-exporter",instance="exporter:7777"'

HEAD = """# A healthy install with default flags stays quiet. Every series below is
# one real scrape (tests/docs/fixtures/quiet-scrape.prom: the exporter with
# default flags watching nats-server 2.15.1 with JetStream, one stream and
# one consumer that has acknowledged all 20 messages), held for an hour;
# no alert may fire. Written by scripts/alert-quiet-test.py.
"""


def series(line):
    name_labels = line[: line.rindex(" ")]
    if "{" in name_labels:
        name, labels = name_labels.split("{", 1)
        return f"{name}{{{TARGET},{labels}"
    return f"{name_labels}{{{TARGET}}}"


def main():
    inputs = [{"series": f"up{{{TARGET}}}", "values": "1x60"}]
    with open(os.path.join(ROOT, "tests/docs/fixtures/quiet-scrape.prom")) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            value = line[line.rindex(" ") + 1 :]
            inputs.append({"series": series(line), "values": f"{value}x60"})
    alerts = []
    files = sorted(glob.glob(os.path.join(ROOT, "alerts/*.rules.yml")))
    for path in files:
        for group in yaml.safe_load(open(path))["groups"]:
            alerts += [r["alert"] for r in group["rules"] if "alert" in r]
    cases = [
        {"eval_time": t, "alertname": a, "exp_alerts": []}
        for a in alerts
        for t in ("30m", "60m")
    ]
    doc = {
        "rule_files": ["../" + os.path.basename(p) for p in files],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": inputs, "alert_rule_test": cases}],
    }
    out = os.path.join(ROOT, "alerts/tests/quiet.test.yml")
    with open(out, "w") as f:
        f.write(HEAD + yaml.safe_dump(doc, sort_keys=False, width=1000))


main()
