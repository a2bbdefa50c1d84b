//! What the ranks must agree on before any data moves — the script, the library, the sizes, the
//! options that change results, the inputs' headers, a session's calls — checked with one
//! all-gather of a digest (a SHA-256). Only where the digests differ are the facts behind them gathered,
//! so that every rank returns the same error naming each fact that differs and which ranks
//! have which ("rank 0 has m = 120, ranks 1–3 have m = 100"): ranks that disagree would
//! otherwise compute a wrong result in silence, or abort inside MPI.

use fuse_core::distribute::Distributed;
use fuse_core::{Library, Program, Sizes};
use sha2::{Digest as _, Sha256};

use super::Communicator;
use crate::backend::Backend;
use crate::error::{Error, Result};

/// One thing every rank must have alike, as this rank has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    /// What it is about (`m`, `input A`): what the ranks' facts are matched by.
    pub about: String,
    /// What is compared between ranks.
    pub value: String,
    /// How a disagreement shows it: `m = 120`, `the script bicgk.yaml (1f0c9a2e)`.
    pub shown: String,
}

impl Fact {
    /// A fact compared as it is shown.
    pub fn new(about: impl Into<String>, shown: impl Into<String>) -> Fact {
        let shown = shown.into();
        Fact {
            about: about.into(),
            value: shown.clone(),
            shown,
        }
    }

    /// A fact compared by `value` but shown as `shown` (a script by its content, shown by its
    /// file: two copies of one script in other folders agree).
    pub fn shown_as(about: impl Into<String>, value: impl Into<String>, shown: impl Into<String>) -> Fact {
        Fact {
            about: about.into(),
            value: value.into(),
            shown: shown.into(),
        }
    }
}

/// The script's fact: what it computes (its calls, shapes, sizes and precision, not where its
/// file lies nor how it is laid out), shown by its file.
pub fn script_fact(program: &Program) -> Fact {
    let values: Vec<_> = (program.values.iter())
        .map(|v| (&v.name, &v.variable, &v.shape, v.producer))
        .collect();
    let calls: Vec<_> = (program.calls.iter()).map(|c| (&c.callee, &c.args, c.result)).collect();
    let content = format!(
        "{} {} {} {values:?} {:?} {:?} {calls:?}",
        program.name, program.precision, program.sizes, program.inputs, program.outputs
    );
    content_fact("script", &content, &format!("the script {}", program.file))
}

/// The fact of `library`: what its functions compute (not their descriptions nor where their
/// files lie), shown by where it came from.
pub fn library_fact(library: &Library) -> Fact {
    let functions: Vec<_> = (library.functions())
        .map(|f| (&f.name, f.kind, &f.precisions, &f.forms))
        .collect();
    content_fact(
        "library",
        &format!("{functions:?}"),
        &format!("the library {}", library.origin),
    )
}

/// The fact of a distributed plan: how it splits its script (ranks may plan one script with
/// values held otherwise).
pub(crate) fn plan_fact(plan: &Distributed) -> Fact {
    content_fact("plan", &plan.to_string(), &format!("the plan of {}", plan.program.file))
}

/// One fact per size: `m = 120`.
pub fn size_facts(sizes: &Sizes) -> Vec<Fact> {
    (sizes.iter())
        .map(|(s, v)| Fact::new(s, format!("{s} = {v}")))
        .collect()
}

/// The backend's fact: its kind (ranks may run on GPUs of their own, not on a GPU and a CPU).
pub fn backend_fact(backend: &Backend) -> Fact {
    Fact::new("backend", format!("backend {}", backend.name()))
}

/// A fact compared by the digest of `content`, shown as `what` and the digest's first digits.
fn content_fact(about: &str, content: &str, what: &str) -> Fact {
    let hex: String = digest(&[content.as_bytes()])
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Fact::shown_as(about, &hex, format!("{what} ({})", &hex[..8]))
}

/// The SHA-256 of what a rank must have alike with the others.
pub type Digest = [u8; 32];

/// The digest of `parts` (each length-prefixed, so that no bytes move between parts unseen).
pub fn digest(parts: &[&[u8]]) -> Digest {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// `Ok` on every rank where every rank has the same `facts`; else, on every rank, the error
/// naming each fact that differs. Collective: every rank calls it at the same point.
pub fn agree_on_facts(comm: &dyn Communicator, facts: &[Fact]) -> Result<()> {
    let parts: Vec<&[u8]> = (facts.iter())
        .flat_map(|f| [f.about.as_bytes(), f.value.as_bytes()])
        .collect();
    agree_on_digest(comm, &digest(&parts), || facts.to_vec())
}

/// [`agree_on_facts`] for a caller that has a digest of its facts at hand and builds them only
/// where the digests differ (a session, on every flush).
pub fn agree_on_digest(comm: &dyn Communicator, digest: &Digest, facts: impl FnOnce() -> Vec<Fact>) -> Result<()> {
    let digests = comm.all_gather_digest(digest)?;
    if digests.iter().all(|d| *d == digests[0]) {
        return Ok(());
    }
    let all = comm.all_gather_bytes(&encode(&facts()))?;
    let all: Vec<Vec<Fact>> = all.iter().map(|b| decode(b)).collect::<Result<_>>()?;
    let differences = differences(&all);
    if differences.is_empty() {
        // The same facts under other digests: builds of fuse that digest otherwise.
        return Ok(());
    }
    Err(Error::Distribution(format!(
        "the ranks disagree: {}",
        differences.join("; ")
    )))
}

/// At most this many differing facts are named (one difference brings others with it).
const NAMED: usize = 4;
/// At most this many values of one fact are named, with the ranks that have each.
const VALUES: usize = 3;

/// Each fact that the ranks' `facts` do not all have alike: which ranks have which value.
fn differences(facts: &[Vec<Fact>]) -> Vec<String> {
    let mut abouts: Vec<&str> = Vec::new();
    for fact in facts.iter().flatten() {
        if !abouts.contains(&fact.about.as_str()) {
            abouts.push(&fact.about);
        }
    }
    let mut out: Vec<String> = abouts
        .iter()
        .filter_map(|&about| {
            let held: Vec<Option<&Fact>> = facts.iter().map(|f| f.iter().find(|f| f.about == about)).collect();
            disagreement(about, &held)
        })
        .collect();
    if out.len() > NAMED {
        let more = out.len() - NAMED;
        out.truncate(NAMED);
        out.push(format!("and {more} more"));
    }
    out
}

/// `rank 0 has m = 120, ranks 1–3 have m = 100` where the ranks' values of `about` (`held`, by
/// rank; `None` where a rank has no such fact) differ.
fn disagreement(about: &str, held: &[Option<&Fact>]) -> Option<String> {
    // The values in order of the first rank that has each, with the ranks that have it.
    let mut groups: Vec<(Option<&Fact>, Vec<usize>)> = Vec::new();
    for (rank, fact) in held.iter().enumerate() {
        let value = fact.map(|f| &f.value);
        match groups.iter_mut().find(|(g, _)| g.map(|f| &f.value) == value) {
            Some((_, ranks)) => ranks.push(rank),
            None => groups.push((*fact, vec![rank])),
        }
    }
    if groups.len() < 2 {
        return None;
    }
    let mut parts: Vec<String> = (groups.iter().take(VALUES))
        .map(|(fact, ranks)| {
            let shown = fact.map_or_else(|| format!("no {about}"), |f| f.shown.clone());
            let verb = if ranks.len() == 1 { "has" } else { "have" };
            format!("{} {verb} {shown}", ranks_phrase(ranks))
        })
        .collect();
    if groups.len() > VALUES {
        let rest: Vec<usize> = groups[VALUES..].iter().flat_map(|(_, r)| r.iter().copied()).collect();
        parts.push(format!(
            "{} have {} other values",
            ranks_phrase(&rest),
            groups.len() - VALUES
        ));
    }
    Some(parts.join(", "))
}

/// `rank 2`, `ranks 1–3`, `ranks 0, 2 and 5–7` (`ranks` ascending).
fn ranks_phrase(ranks: &[usize]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &r in ranks {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == r => *end = r,
            _ => runs.push((r, r)),
        }
    }
    let runs: Vec<String> = (runs.iter())
        .flat_map(|&(a, b)| match b - a {
            0 => vec![a.to_string()],
            1 => vec![a.to_string(), b.to_string()],
            _ => vec![format!("{a}–{b}")],
        })
        .collect();
    let list = match runs.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => runs.concat(),
    };
    match ranks.len() {
        1 => format!("rank {list}"),
        _ => format!("ranks {list}"),
    }
}

/// `facts` as bytes: each string as its length (8 bytes, little-endian) and its UTF-8.
fn encode(facts: &[Fact]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in facts.iter().flat_map(|f| [&f.about, &f.value, &f.shown]) {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    out
}

fn decode(mut bytes: &[u8]) -> Result<Vec<Fact>> {
    let bad = || Error::Internal("a rank sent facts that do not decode".into());
    let mut strings = Vec::new();
    while let Some((len, rest)) = bytes.split_first_chunk::<8>() {
        let len = usize::try_from(u64::from_le_bytes(*len)).map_err(|_| bad())?;
        let (s, rest) = rest.split_at_checked(len).ok_or_else(bad)?;
        strings.push(String::from_utf8(s.to_vec()).map_err(|_| bad())?);
        bytes = rest;
    }
    if !bytes.is_empty() || strings.len() % 3 != 0 {
        return Err(bad());
    }
    Ok((strings.chunks_exact(3))
        .map(|s| Fact::shown_as(s[0].clone(), s[1].clone(), s[2].clone()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distributed::LocalRanks;

    #[test]
    fn ranks_are_named_in_runs() {
        assert_eq!(ranks_phrase(&[2]), "rank 2");
        assert_eq!(ranks_phrase(&[1, 2, 3]), "ranks 1–3");
        assert_eq!(ranks_phrase(&[0, 1]), "ranks 0 and 1");
        assert_eq!(ranks_phrase(&[0, 2, 5, 6, 7]), "ranks 0, 2 and 5–7");
    }

    #[test]
    fn facts_survive_the_trip_between_ranks() {
        let facts = vec![
            Fact::new("m", "m = 120"),
            Fact::shown_as("script", "9f", "the script a.yaml (9f)"),
        ];
        assert_eq!(decode(&encode(&facts)).unwrap(), facts);
        assert!(decode(&encode(&facts)[..5]).is_err());
    }

    /// Every rank gets the one message naming who has what; copies of a script in two places
    /// agree; a fact only some ranks have is named too.
    #[test]
    fn every_rank_names_the_ranks_that_differ() {
        let results = LocalRanks::new(4).run(|comm| {
            let m = if comm.rank() == 0 { 120 } else { 100 };
            let mut facts = vec![
                Fact::shown_as("script", "9f", format!("the script dir{}/a.yaml (9f)", comm.rank())),
                Fact::new("m", format!("m = {m}")),
            ];
            if comm.rank() == 3 {
                facts.push(Fact::new("--seed", "--seed 5"));
            }
            agree_on_facts(&comm, &facts).map_err(|e| e.to_string())
        });
        let want = "the ranks disagree: rank 0 has m = 120, ranks 1–3 have m = 100; \
                    ranks 0–2 have no --seed, rank 3 has --seed 5";
        for result in results {
            assert_eq!(result.unwrap_err(), want);
        }
        let agreed = LocalRanks::new(3).run(|comm| agree_on_facts(&comm, &[Fact::new("m", "m = 7")]).is_ok());
        assert_eq!(agreed, [true; 3]);
    }
}
