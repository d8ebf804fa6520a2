//! The binary's commands beyond serving: `retrylab compare`, `retrylab check`,
//! `retrylab grade` and `retrylab export`.

pub mod check;
pub mod compare;
pub mod export;
pub mod family;
pub mod grade;

use clap::CommandFactory;

use crate::compare::presets;
use crate::config::Config;

/// The binary's command line: `Config`'s, with the lists the code holds written in from the code
/// itself, so `--help` cannot drift from them: the presets `compare --policy` takes, from the
/// table in `static/policy-presets.json`. `main` parses through this.
pub fn command() -> clap::Command {
    let names: Vec<&str> = presets::all().iter().map(|p| p.name.as_str()).collect();
    let aliases: Vec<&str> =
        presets::all().iter().flat_map(|p| p.aliases.iter().map(String::as_str)).collect();
    let policy = format!(
        "A preset ({}; the old names {} still work; static/policy-presets.json defines them) or a \
         custom policy as JSON: `{{\"name\": \"mine\", \"policy\": {{...}}}}`. Two to five",
        names.join(", "),
        aliases.join(", ")
    );
    Config::command().mut_subcommand("compare", |compare| compare.mut_arg("policies", |arg| arg.help(policy)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_help_lists_every_preset_and_alias() {
        let mut command = command();
        let compare = command.find_subcommand_mut("compare").unwrap();
        let help = compare.render_help().to_string();
        for preset in presets::all() {
            assert!(help.contains(&preset.name), "compare --help lacks {}", preset.name);
            for alias in &preset.aliases {
                assert!(help.contains(alias.as_str()), "compare --help lacks alias {alias}");
            }
        }
    }
}
