//! The server side of a grid: the endpoint's defences a comparison crosses with its client
//! policies, each a row of the grid under a name. A few are named here (the page's choices
//! and `retrylab compare --defence NAME`); any other is the JSON of the endpoint's
//! `defences` (`PUT /api/labs/{lab}/downstream`), under a name of the caller's.

use serde::{Deserialize, Serialize};

use crate::downstream::{AimdSettings, Defences, Discipline, DownstreamSettings, LimitSettings};
use crate::invalid::Invalid;

use super::scenario::Scenario;

/// Most defences in one grid: with three policies, nine labs a run, as many as this machine
/// runs together and still measures.
pub const MAX_DEFENCES: usize = 3;
/// Most policies in a grid (the columns).
pub const MAX_GRID_POLICIES: usize = 3;

/// One row of a grid: the endpoint's defences under a name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NamedDefences {
    /// The row's name, as the grid shows it.
    pub name: String,
    /// The endpoint's defences, as `PUT /api/labs/{lab}/downstream` takes them (absent fields
    /// are off).
    pub defences: Defences,
}

/// The named defences, with what each does in a few words, in the order the page offers them.
pub fn named() -> Vec<(NamedDefences, &'static str)> {
    let row = |name: &str, defences: Defences| NamedDefences { name: name.to_owned(), defences };
    let off = Defences::default();
    vec![
        (row("none", off), "no defence: one FIFO line, every request worked in turn"),
        (
            row("deadline", Defences { deadline: true, ..off }),
            "drops, unworked, a request whose client will have given up before its work could end",
        ),
        (
            row("codel", Defences { queue: Discipline::Codel, ..off }),
            "CoDel queue timeouts: once a queue stands, a request may wait 25 ms in it",
        ),
        (
            row("adaptive_lifo", Defences { queue: Discipline::AdaptiveLifo, ..off }),
            "serves the newest first while a queue stands",
        ),
        (
            row("aimd", Defences { limit: LimitSettings::Aimd(AimdSettings::default()), ..off }),
            "Netflix's AIMD concurrency limit: over it, 503 at once",
        ),
    ]
}

/// The named defences called `name`; an unknown name is an error listing them.
pub fn find(name: &str) -> Result<NamedDefences, String> {
    let all = named();
    if let Some((found, _)) = all.iter().find(|(d, _)| d.name == name) {
        return Ok(found.clone());
    }
    let names: Vec<String> = all.into_iter().map(|(d, _)| d.name).collect();
    Err(format!(
        "unknown defence '{name}'; choose one of: {}, or give its settings as JSON",
        names.join(", ")
    ))
}

/// Why these defences cannot be a row of a grid on `scenario`, naming the field as the request
/// does (`defences[1].defences.queue`); `row` is its index.
pub fn refusal(scenario: Scenario, burst: usize, row: usize, named: &NamedDefences) -> Option<Invalid> {
    let at = |field: &str| format!("defences[{row}].{field}");
    if named.name.trim().is_empty() || named.name.chars().count() > 40 {
        return Some(Invalid::new(at("name"), "a defence's name is 1 to 40 characters: it names its row"));
    }
    let mut downstream = scenario.downstream(burst);
    downstream.defences = Some(named.defences);
    let refused = DownstreamSettings::default().updated(&downstream).err()?;
    let field = refused.field.strip_prefix("downstream.").unwrap_or(&refused.field).to_owned();
    let why = if field.starts_with("defences.") && named.defences != Defences::default() {
        match scenario {
            // The modes without a line have nothing to defend.
            Scenario::Overload | Scenario::Metastable => refused.detail,
            _ => format!(
                "{}; the {} scenario's endpoint has no line to defend: a grid runs on overload or metastable",
                refused.detail,
                serde_json::to_value(scenario)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            ),
        }
    } else {
        refused.detail
    };
    Some(Invalid::new(at(&field), why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_defence_is_a_row_the_overloaded_scenarios_take() {
        for (defence, _) in named() {
            for scenario in [Scenario::Overload, Scenario::Metastable] {
                assert_eq!(refusal(scenario, 20, 0, &defence), None, "{}", defence.name);
            }
        }
        assert!(find("codel").is_ok());
        assert!(find("moat").unwrap_err().contains("none, deadline, codel, adaptive_lifo, aimd"));
    }

    #[test]
    fn a_defence_out_of_range_or_without_a_line_is_refused_naming_its_field() {
        let codel = find("codel").unwrap();
        let tight = NamedDefences { defences: Defences { codel_target_ms: 0, ..codel.defences }, ..codel };
        let refused = refusal(Scenario::Overload, 20, 1, &tight).unwrap();
        assert_eq!(refused.field, "defences[1].defences.codel_target_ms");
        let refused = refusal(Scenario::Outage, 20, 0, &find("deadline").unwrap()).unwrap();
        assert_eq!(refused.field, "defences[0].defences.deadline");
        assert!(refused.detail.contains("overload or metastable"), "{}", refused.detail);
        // No defence at all is a row on any scenario.
        assert_eq!(refusal(Scenario::Outage, 20, 0, &find("none").unwrap()), None);
    }
}
