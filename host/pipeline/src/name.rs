//! Pipeline names: what a name may hold, since it becomes a folder of the state
//! directory, part of Kafka topic and group names, and a path segment of the admin API.

/// The longest name a pipeline may have, in bytes: short enough for a file name on any
/// file system and for the Kafka topics named after it (at most 249 bytes in all).
pub const MAX_NAME_LEN: usize = 100;

/// Checks a name given in a pipeline file (`name = "..."`) or to the admin API: 1 to
/// [`MAX_NAME_LEN`] ASCII letters, digits, `.`, `_` and `-`, starting with a letter or a
/// digit. So a name is one folder inside the state directory, never `.`, `..`, an
/// absolute path or a path with a `/`.
pub fn check(name: &str) -> anyhow::Result<()> {
    let rule = "a pipeline name is 1 to 100 ASCII letters, digits, '.', '_' and '-', \
                starting with a letter or a digit";
    anyhow::ensure!(!name.is_empty(), "the name is empty: {rule}");
    anyhow::ensure!(
        name.len() <= MAX_NAME_LEN,
        "the name is {} bytes long: {rule}",
        name.len()
    );
    if let Some(bad) = name
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        anyhow::bail!("the name {name:?} holds {bad:?}: {rule}");
    }
    anyhow::ensure!(
        name.starts_with(|c: char| c.is_ascii_alphanumeric()),
        "the name {name:?} starts with {:?}: {rule}",
        &name[..1]
    );
    Ok(())
}

/// A valid name made from a file's or folder's name (the default when the pipeline file
/// gives none): characters a name may not hold become `-`, leading ones that may not
/// start it are dropped, and it is cut at [`MAX_NAME_LEN`]; `pipeline` if nothing is left.
pub fn derive(from: &str) -> String {
    let mapped: String = from
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = mapped.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
    let mut name: String = trimmed.chars().take(MAX_NAME_LEN).collect();
    if name.is_empty() {
        name = "pipeline".to_string();
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_would_leave_the_state_directory_are_refused() {
        for bad in [
            "",
            ".",
            "..",
            "../../escaped",
            "/etc",
            "a/b",
            "a\\b",
            ".hidden",
            "-x",
        ] {
            assert!(check(bad).is_err(), "{bad:?} accepted");
        }
        let long = "a".repeat(MAX_NAME_LEN + 1);
        assert!(check(&long).unwrap_err().to_string().contains("101 bytes"));
        assert!(check("é").is_err());
        for good in ["orders", "ad-clicks.v2", "A_1", &"a".repeat(MAX_NAME_LEN)] {
            check(good).unwrap();
        }
    }

    #[test]
    fn derived_names_are_always_valid() {
        for (from, name) in [
            ("orders", "orders"),
            (".tmpAb12", "tmpAb12"),
            ("my pipeline", "my-pipeline"),
            ("..", "pipeline"),
            ("", "pipeline"),
            ("über", "ber"),
        ] {
            assert_eq!(derive(from), name);
            check(&derive(from)).unwrap();
        }
        assert_eq!(derive(&"x".repeat(300)).len(), MAX_NAME_LEN);
    }
}
