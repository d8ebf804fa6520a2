//! `retrylab check URL`: probes the idempotency and retry contract of an API the user owns
//! (`crate::contract`) and prints what each check found, as a table, JSON or JUnit XML, with a
//! curl command that reproduces each failure. Exit status: 0 when every check passed, warned or
//! did not apply; 1 when a check failed or could not be judged; 2 on bad usage (a URL that does
//! not parse or answer, a body that is not JSON or that the API refuses, an effect query that
//! does not answer JSON, a host not allowed).

use std::net::IpAddr;

use reqwest::{Method, Url};

use crate::config::CheckArgs;
use crate::contract::{self, BodyTemplate, Effect, Exchange, Report, Target, Trust, Verdict};

/// What the process should exit with.
pub async fn run(args: CheckArgs) -> i32 {
    let target = match target(&args) {
        Ok(target) => target,
        Err(refused) => {
            eprintln!("retrylab check: {refused}");
            return 2;
        }
    };
    let dry_run = target.dry_run;
    let report = match contract::check(target).await {
        Ok(report) => report,
        Err(refused) => {
            eprintln!("retrylab check: {refused}");
            return 2;
        }
    };
    if dry_run {
        print!("{}", plan(&report, &curl_trust(&args)));
        return 0;
    }
    if let Some(path) = &args.junit
        && let Err(e) = std::fs::write(path, junit(&report))
    {
        eprintln!("retrylab check: cannot write {}: {e}", path.display());
        return 2;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("a report serializes"));
    } else {
        print!("{}", table(&report, &curl_trust(&args)));
    }
    if let Some(refused) = &report.refused {
        eprintln!("retrylab check: {}", refused.said(&report.url));
        return 2;
    }
    let failed = |c: &&contract::CheckResult| matches!(c.verdict, Verdict::Fail | Verdict::NotJudged);
    if report.checks.iter().any(|c| failed(&c)) { 1 } else { 0 }
}

fn target(args: &CheckArgs) -> Result<Target, String> {
    let url = parse_url(&args.url, "URL")?;
    allowed(&url, &args.allow_hosts)?;
    let method = Method::from_bytes(args.method.to_ascii_uppercase().as_bytes())
        .map_err(|_| format!("--method {:?} is not an HTTP method", args.method))?;
    let body = BodyTemplate::parse(&args.body)?;
    let in_progress_wait = std::time::Duration::from_millis(args.in_progress_wait_ms);
    let effect = match &args.effect {
        None => None,
        Some(raw) => {
            let raw = raw.trim();
            let raw = raw.strip_prefix("GET ").unwrap_or(raw).trim();
            let url = parse_url(raw, "--effect")?;
            allowed(&url, &args.allow_hosts)?;
            Some(Effect { url, pointer: args.effect_pointer.clone() })
        }
    };
    Ok(Target {
        url,
        method,
        body,
        effect,
        max_requests: args.max_requests,
        in_progress_wait,
        dry_run: args.dry_run,
        tls: trust(args)?,
    })
}

fn parse_url(raw: &str, what: &str) -> Result<Url, String> {
    let url = Url::parse(raw).map_err(|e| format!("{what} {raw:?} does not parse: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(format!("{what} {raw:?} is not an http or https URL"));
    }
    Ok(url)
}

/// `--cacert` and `--insecure`, as curl reads them: the file's certificates replace the
/// platform's roots; `--insecure` accepts any certificate.
fn trust(args: &CheckArgs) -> Result<Trust, String> {
    match (&args.cacert, args.insecure) {
        (Some(_), true) => Err("--cacert and --insecure contradict each other: give one".into()),
        (None, true) => Ok(Trust::Insecure),
        (None, false) => Ok(Trust::Platform),
        (Some(path), false) => {
            let pem = std::fs::read(path).map_err(|e| format!("--cacert {}: {e}", path.display()))?;
            match reqwest::Certificate::from_pem_bundle(&pem) {
                Ok(roots) if !roots.is_empty() => Ok(Trust::Only(roots)),
                _ => Err(format!("--cacert {}: no PEM certificate in it", path.display())),
            }
        }
    }
}

/// Probing sends real requests that may have effects: only loopback, unless the host is named.
fn allowed(url: &Url, allow: &[String]) -> Result<(), String> {
    let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
    let loopback =
        host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if loopback || allow.iter().any(|a| a.eq_ignore_ascii_case(host)) {
        return Ok(());
    }
    Err(format!(
        "{host} is not loopback: the checks send requests that may change data there; add --allow-host {host} if it is yours"
    ))
}

fn verdict(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Warn => "warn",
        Verdict::Fail => "fail",
        Verdict::NotApplicable => "not_applicable",
        Verdict::NotJudged => "not_judged",
    }
}

fn table(report: &Report, trust: &str) -> String {
    let mut out = format!("retrylab check {}\n\n", report.url);
    let probe = match &report.refused {
        None => {
            format!("accepted with {}", report.probe.status.map_or("nothing yet".into(), |s| s.to_string()))
        }
        Some(refused) => format!("refused with {}: {}", refused.status, refused.answer),
    };
    out.push_str(&format!("{:<38}{probe}\n", "probe (the body, a fresh key)"));
    for check in &report.checks {
        out.push_str(&format!("{:<22}{:<16}{}\n", check.id, verdict(check.verdict), check.detail));
        out.push_str(&format!("{:<38}source: {}\n", "", check.source));
    }
    out.push_str(&format!("\nkeys sent: {}\n", report.keys.join(", ")));
    if !report.locations.is_empty() {
        out.push_str(&format!("created (Location): {}\n", report.locations.join(", ")));
    }
    if report.refused.is_some() {
        out.push_str(&format!("\nthe probe was refused; to reproduce:\n  {}\n", curl(&report.probe, trust)));
    }
    for check in report.checks.iter().filter(|c| c.verdict == Verdict::Fail) {
        out.push_str(&format!("\n{} failed; to reproduce:\n", check.id));
        for e in check.requests.iter().filter(|e| e.method != "GET" || check.requests.len() == 1) {
            out.push_str(&format!("  {}{}\n", curl(e, trust), if e.together { " &" } else { "" }));
        }
    }
    out
}

/// Every request a run would send, one a line.
fn plan(report: &Report, trust: &str) -> String {
    let mut out = format!("retrylab check {} --dry-run: the requests it would send\n", report.url);
    out.push_str(&format!("{:<22}{}\n", "probe", curl(&report.probe, trust)));
    for check in &report.checks {
        for e in &check.requests {
            out.push_str(&format!("{:<22}{}\n", check.id, curl(e, trust)));
        }
    }
    out
}

/// The curl flags that trust the certificate as this run did.
fn curl_trust(args: &CheckArgs) -> String {
    match (&args.cacert, args.insecure) {
        (Some(path), _) => format!(" --cacert {}", quote(&path.display().to_string())),
        (None, true) => " -k".into(),
        (None, false) => String::new(),
    }
}

/// A curl command that sends `e` again, trusting the certificate as the run did (`trust`).
fn curl(e: &Exchange, trust: &str) -> String {
    let mut said = format!("curl -sS -i{trust} -X {}", e.method);
    if let Some(body) = &e.body {
        said.push_str(&format!(" -H 'Content-Type: application/json' --data-raw {}", quote(body)));
    }
    for key in &e.keys {
        said.push_str(&format!(" -H {}", quote(&format!("Idempotency-Key: {key}"))));
    }
    if e.keys.first().is_some_and(String::is_empty) {
        // curl drops a header with an empty value unless it ends in a semicolon.
        said = said.replace("'Idempotency-Key: '", "'Idempotency-Key;'");
    }
    said.push_str(&format!(" {}", quote(&e.url)));
    said
}

/// Quotes for a POSIX shell.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

pub(crate) fn xml(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The checks as JUnit XML: a fail is a failure, not_applicable is skipped, and not_judged is
/// an error (the test could not be run as meant, which a CI must not read as green).
pub fn junit(report: &Report) -> String {
    let count = |v: Verdict| report.checks.iter().filter(|c| c.verdict == v).count();
    let (failures, skipped, errors) =
        (count(Verdict::Fail), count(Verdict::NotApplicable), count(Verdict::NotJudged));
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"retrylab check {}\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\" errors=\"{errors}\">\n",
        xml(&report.url),
        report.checks.len()
    );
    for check in &report.checks {
        out.push_str(&format!("  <testcase classname=\"retrylab.check\" name=\"{}\">", check.id));
        match check.verdict {
            Verdict::Fail => out.push_str(&format!("<failure message=\"{}\"/>", xml(&check.detail))),
            Verdict::NotApplicable => out.push_str(&format!("<skipped message=\"{}\"/>", xml(&check.detail))),
            Verdict::NotJudged => out.push_str(&format!("<error message=\"{}\"/>", xml(&check.detail))),
            Verdict::Pass | Verdict::Warn => out.push_str(&format!(
                "<system-out>{}: {}</system-out>",
                verdict(check.verdict),
                xml(&check.detail)
            )),
        }
        out.push_str("</testcase>\n");
    }
    out.push_str("</testsuite>\n");
    out
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::config::{Command, Config};

    #[test]
    fn the_cap_on_requests_defaults_to_the_contract_s_and_other_hosts_need_naming() {
        let config = Config::try_parse_from(["retrylab", "check", "http://127.0.0.1:1/orders"]).unwrap();
        let Some(Command::Check(args)) = config.command else { panic!("a check") };
        assert_eq!(args.max_requests, contract::DEFAULT_MAX_REQUESTS);
        let url: Url = "http://api.example.com/orders".parse().unwrap();
        assert!(allowed(&url, &[]).unwrap_err().contains("--allow-host api.example.com"));
        assert_eq!(allowed(&url, &["api.example.com".into()]), Ok(()));
        assert_eq!(allowed(&"http://[::1]:8080/".parse().unwrap(), &[]), Ok(()));
    }
}
