//! What the lab found: for each loss the true count, the count Prometheus
//! holds and the alert, plus every check that failed. In report mode it is
//! printed as a table at the end; in check mode every check is also printed
//! as it is made.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::prom::{show, Alert};

/// One line of the report.
struct Row {
    scenario: String,
    what: String,
    truth: String,
    prometheus: String,
}

/// The lab's findings.
pub struct Report {
    check_mode: bool,
    started: Instant,
    scenario: String,
    rows: Vec<Row>,
    alerts: Vec<(String, String)>,
    fired: BTreeSet<String>,
    not_driven: Vec<(String, String)>,
    problems: Vec<String>,
    /// Alerts that may fire by now: those of the scenarios run so far.
    allowed: BTreeSet<String>,
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

impl Report {
    /// An empty report.
    pub fn new(check_mode: bool) -> Self {
        Report {
            check_mode,
            started: Instant::now(),
            scenario: String::new(),
            rows: Vec::new(),
            alerts: Vec::new(),
            fired: BTreeSet::new(),
            not_driven: Vec::new(),
            problems: Vec::new(),
            allowed: BTreeSet::new(),
        }
    }

    /// Starts a scenario, whose alerts may fire from now on.
    pub fn scenario(&mut self, name: &str, alerts: &[&str]) {
        self.scenario = name.to_string();
        self.allowed.extend(alerts.iter().map(|a| a.to_string()));
        println!(
            "\n== {name}  [{:.0} s]",
            self.started.elapsed().as_secs_f64()
        );
    }

    /// Lets `alert` fire from now on (an alert whose cause the lab only
    /// learns during the scenario).
    pub fn allow(&mut self, alert: &str) {
        self.allowed.insert(alert.to_string());
    }

    /// Prints a line of progress.
    pub fn note(&self, text: &str) {
        println!("   {text}");
    }

    /// Records a check; a failed one makes the lab fail.
    pub fn check(&mut self, ok: bool, what: &str) {
        if self.check_mode || !ok {
            println!("   {} {what}", if ok { "ok  " } else { "FAIL" });
        }
        if !ok {
            self.problems.push(format!("{}: {what}", self.scenario));
        }
    }

    /// A count: the truth the lab knows and what Prometheus holds for `query`.
    pub fn count(&mut self, what: &str, truth: f64, query: &str, got: Option<f64>) {
        let shown = got.map_or("(no data)".to_string(), number);
        self.rows.push(Row {
            scenario: self.scenario.clone(),
            what: what.to_string(),
            truth: number(truth),
            prometheus: shown,
        });
        self.term(what, truth, query, got);
    }

    /// A count checked as [`Self::count`] checks it, but left out of the
    /// table: a term of a sum that the table shows whole ([`Self::sum`]).
    pub fn term(&mut self, what: &str, truth: f64, query: &str, got: Option<f64>) {
        let shown = got.map_or("(no data)".to_string(), number);
        self.check(
            got == Some(truth),
            &format!(
                "{what}: true {} = Prometheus {shown}  [{query}]",
                number(truth)
            ),
        );
    }

    /// A sum and its terms as the lab knows them and as Prometheus holds
    /// them, for the table; each term is checked with [`Self::term`].
    pub fn sum(&mut self, what: &str, truth: &str, prometheus: &str) {
        self.rows.push(Row {
            scenario: self.scenario.clone(),
            what: what.to_string(),
            truth: truth.to_string(),
            prometheus: prometheus.to_string(),
        });
    }

    /// A fact with no Prometheus counterpart (said so in the report).
    pub fn fact(&mut self, what: &str, truth: f64, why: &str) {
        self.rows.push(Row {
            scenario: self.scenario.clone(),
            what: what.to_string(),
            truth: number(truth),
            prometheus: why.to_string(),
        });
    }

    /// An alert that must fire in this scenario with `labels`.
    pub fn alert(&mut self, name: &str, labels: &[(&str, &str)], found: Option<Alert>) {
        let want: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        let line = match &found {
            Some(a) => format!("{name} firing {}", show(&a.labels)),
            None => format!("{name} did NOT fire with {{{}}}", want.join(",")),
        };
        if found.is_some() {
            self.fired.insert(name.to_string());
        }
        self.alerts.push((self.scenario.clone(), line.clone()));
        self.check(found.is_some(), &line);
    }

    /// An alert that must stop once its cause is gone.
    pub fn resolved(&mut self, name: &str, labels: &[(&str, &str)], stopped: bool) {
        let want: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        let line = format!(
            "{name} {} {{{}}}",
            if stopped {
                "stopped firing"
            } else {
                "did NOT stop firing"
            },
            want.join(",")
        );
        self.alerts.push((self.scenario.clone(), line.clone()));
        self.check(stopped, &line);
    }

    /// Checks that nothing fires beyond the alerts of the scenarios so far.
    pub fn only_expected(&mut self, firing: &[Alert]) {
        let extra: BTreeSet<String> = firing
            .iter()
            .filter(|a| !self.allowed.contains(&a.name))
            .map(|a| format!("{} {}", a.name, show(&a.labels)))
            .collect();
        let list: Vec<String> = extra.into_iter().collect();
        self.check(
            list.is_empty(),
            &format!(
                "no other alert fires{}",
                if list.is_empty() {
                    String::new()
                } else {
                    format!(": {}", list.join("; "))
                }
            ),
        );
    }

    /// Every alert of the rules must have fired in its scenario or be
    /// explained in `why_not` (an alert that cannot fire in a lab).
    pub fn cover(&mut self, alerts: &[String], why_not: &[(&str, &str)]) {
        self.scenario = "alerts the lab does not drive".to_string();
        for a in alerts {
            if self.fired.contains(a) {
                continue;
            }
            match why_not.iter().find(|(name, _)| name == a) {
                Some((_, why)) => self.not_driven.push((a.clone(), why.to_string())),
                None => self.check(
                    false,
                    &format!("{a} neither fired in a scenario nor is explained"),
                ),
            }
        }
    }

    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }

    /// Prints the table and the problems.
    pub fn print(&self) {
        println!("\n== Report: each loss, its true count, the count Prometheus holds, the alert\n");
        let w0 = self
            .rows
            .iter()
            .map(|r| r.what.len())
            .max()
            .unwrap_or(0)
            .max(4);
        let w1 = self
            .rows
            .iter()
            .map(|r| r.truth.len())
            .max()
            .unwrap_or(0)
            .max(4);
        println!("{:<w0$}  {:>w1$}  Prometheus", "what", "true");
        let mut last = String::new();
        for r in &self.rows {
            if r.scenario != last {
                println!("-- {}", r.scenario);
                last = r.scenario.clone();
            }
            println!("{:<w0$}  {:>w1$}  {}", r.what, r.truth, r.prometheus);
        }
        println!("\nalerts:");
        let mut last = String::new();
        for (scenario, line) in &self.alerts {
            if *scenario != last {
                println!("-- {scenario}");
                last = scenario.clone();
            }
            println!("   {line}");
        }
        if !self.not_driven.is_empty() {
            println!("\nalerts the lab cannot make fire:");
            for (a, why) in &self.not_driven {
                println!("   {a}: {why}");
            }
        }
        if self.problems.is_empty() {
            println!("\nall checks passed");
        } else {
            println!("\n{} problem(s):", self.problems.len());
            for p in &self.problems {
                println!("  - {p}");
            }
        }
    }
}
