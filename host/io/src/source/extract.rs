//! Pulling the key and timestamp fields out of a JSON record in one pass.
//!
//! Building a `serde_json::Value` for every record would allocate the whole document.
//! Instead a [`FieldPaths`] walks the object once, skipping every member that is not on
//! one of its paths, and returns the raw JSON text of the fields it was asked for.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::fmt;

/// A set of object paths (JSON pointers such as `/user/id`, or bare field names).
#[derive(Debug, Clone)]
pub struct FieldPaths {
    paths: Vec<Vec<String>>,
}

impl FieldPaths {
    /// Parses each path; a bare name `ad_id` means the top-level field `/ad_id`.
    pub fn new(paths: &[&str]) -> Result<Self, String> {
        let paths = paths
            .iter()
            .map(|p| parse_pointer(p))
            .collect::<Result<_, _>>()?;
        Ok(Self { paths })
    }

    /// Finds the fields in `json`; `found[i]` is the raw text of path `i`, if present.
    /// Fails if `json` is not one well-formed JSON object.
    pub fn extract<'de>(
        &self,
        json: &'de str,
        found: &mut [Option<&'de RawValue>],
    ) -> Result<(), String> {
        debug_assert_eq!(found.len(), self.paths.len());
        found.iter_mut().for_each(|f| *f = None);
        let selected: Vec<usize> = (0..self.paths.len()).collect();
        let mut de = serde_json::Deserializer::from_str(json);
        ObjectSeed {
            paths: &self.paths,
            selected: &selected,
            depth: 0,
            found,
        }
        .deserialize(&mut de)
        .map_err(|e| describe(&e))?;
        de.end().map_err(|e| describe(&e))
    }
}

fn describe(e: &serde_json::Error) -> String {
    match e.classify() {
        serde_json::error::Category::Data => format!("not a JSON object: {e}"),
        _ => format!("not valid JSON: {e}"),
    }
}

fn parse_pointer(path: &str) -> Result<Vec<String>, String> {
    if path.is_empty() {
        return Err("a field path cannot be empty".into());
    }
    let Some(pointer) = path.strip_prefix('/') else {
        return Ok(vec![path.to_string()]);
    };
    pointer
        .split('/')
        .map(|seg| {
            if seg.is_empty() {
                return Err(format!("JSON pointer {path:?} has an empty segment"));
            }
            Ok(seg.replace("~1", "/").replace("~0", "~"))
        })
        .collect()
}

/// Visits one object level, keeping only the paths whose prefix matched so far.
struct ObjectSeed<'a, 'f, 'de> {
    paths: &'a [Vec<String>],
    selected: &'a [usize],
    depth: usize,
    found: &'f mut [Option<&'de RawValue>],
}

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_, '_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_, '_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.depth == 0 {
            f.write_str("a JSON object")
        } else {
            f.write_str("an object on the field path")
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut deeper = Vec::new();
        while let Some(name) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let on_path = |&&i: &&usize| self.paths[i][self.depth] == *name;
            let mut matching = self.selected.iter().filter(on_path).peekable();
            if matching.peek().is_none() {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            deeper.clear();
            let mut leaf = None;
            for &i in matching {
                if self.paths[i].len() == self.depth + 1 {
                    leaf = Some(i);
                } else {
                    deeper.push(i);
                }
            }
            match (leaf, deeper.is_empty()) {
                (Some(i), true) => self.found[i] = Some(map.next_value::<&'de RawValue>()?),
                (None, false) => {
                    let seed = NestedSeed {
                        paths: self.paths,
                        selected: &deeper,
                        depth: self.depth + 1,
                    };
                    let nested = map.next_value_seed(seed)?;
                    for (i, raw) in nested {
                        self.found[i] = Some(raw);
                    }
                }
                // One path ends here and another goes deeper: take the raw value and
                // read the deeper fields out of it.
                (Some(i), false) => {
                    let raw = map.next_value::<&'de RawValue>()?;
                    self.found[i] = Some(raw);
                    let mut inner = serde_json::Deserializer::from_str(raw.get());
                    let seed = NestedSeed {
                        paths: self.paths,
                        selected: &deeper,
                        depth: self.depth + 1,
                    };
                    if let Ok(nested) = seed.deserialize(&mut inner) {
                        for (j, raw) in nested {
                            self.found[j] = Some(raw);
                        }
                    }
                }
                (None, true) => unreachable!("a matching path either ends here or goes deeper"),
            }
        }
        Ok(())
    }
}

/// A nested object level; collects its finds into a vector because the parent's
/// `found` slice cannot be lent to a `next_value_seed` call.
struct NestedSeed<'a> {
    paths: &'a [Vec<String>],
    selected: &'a [usize],
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for NestedSeed<'_> {
    type Value = Vec<(usize, &'de RawValue)>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NestedSeed<'_> {
    type Value = Vec<(usize, &'de RawValue)>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let mut found = vec![None; self.paths.len()];
        ObjectSeed {
            paths: self.paths,
            selected: self.selected,
            depth: self.depth,
            found: &mut found,
        }
        .visit_map(map)?;
        Ok(found
            .into_iter()
            .enumerate()
            .filter_map(|(i, f)| f.map(|raw| (i, raw)))
            .collect())
    }

    // A scalar or array where the path expects an object: the deeper fields are missing.
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Vec::new())
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extract(paths: &[&str], json: &str) -> Result<Vec<Option<String>>, String> {
        let paths = FieldPaths::new(paths).unwrap();
        let mut found = vec![None; paths.paths.len()];
        paths.extract(json, &mut found)?;
        Ok(found
            .into_iter()
            .map(|f| f.map(|raw| raw.get().to_string()))
            .collect())
    }

    #[test]
    fn top_level_and_nested_fields() {
        let json = r#"{"ad_id": "a\"1", "n": {"x": 1, "clicked_at": 17}, "skip": [1, {"a": 2}], "ts": "2026"}"#;
        assert_eq!(
            extract(&["ad_id", "/n/clicked_at", "/ts"], json).unwrap(),
            vec![
                Some(r#""a\"1""#.into()),
                Some("17".into()),
                Some(r#""2026""#.into())
            ]
        );
        assert_eq!(
            extract(&["/n", "/n/x"], json).unwrap(),
            vec![
                Some(r#"{"x": 1, "clicked_at": 17}"#.into()),
                Some("1".into())
            ]
        );
        assert_eq!(
            extract(&["missing", "/skip/a"], json).unwrap(),
            vec![None, None]
        );
    }

    #[test]
    fn malformed_documents_are_errors() {
        for bad in [r#"{"a": 1"#, r#"{"a": 1} trailing"#, "", r#"{"a": tru}"#] {
            let err = extract(&["a"], bad).unwrap_err();
            assert!(err.starts_with("not valid JSON"), "{bad:?}: {err}");
        }
        for not_object in [r#"[1, 2]"#, "17", r#""text""#] {
            let err = extract(&["a"], not_object).unwrap_err();
            assert!(
                err.starts_with("not a JSON object"),
                "{not_object:?}: {err}"
            );
        }
    }

    #[test]
    fn pointer_escapes() {
        assert_eq!(
            extract(&["/a~1b"], r#"{"a/b": 3}"#).unwrap(),
            vec![Some("3".into())]
        );
        assert!(FieldPaths::new(&["/a//b"]).is_err());
    }
}
