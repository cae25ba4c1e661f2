//! The sign of a Kubernetes quantity's text, all `criticalResources` needs.
//! k8s-openapi's `Quantity` is the text, and no crate in the lock file parses
//! quantities; the grammar is small, so it is read here as the API has it:
//!
//! ```text
//! quantity     ::= signedNumber suffix
//! signedNumber ::= number | sign number        sign ::= "+" | "-"
//! number       ::= digits | digits "." digits | digits "." | "." digits
//! suffix       ::= binarySI | decimalExponent | decimalSI
//! binarySI     ::= Ki | Mi | Gi | Ti | Pi | Ei
//! decimalSI    ::= n | u | m | "" | k | M | G | T | P | E
//! decimalExponent ::= "e" signedNumber | "E" signedNumber
//! ```
//!
//! The API server rounds a positive amount up, never to zero ("0.1m will be
//! rounded up to 1m"), and caps a huge one, so the sign of the number is
//! the sign of the quantity whatever the suffix.

use std::cmp::Ordering;

/// Why a text is not a quantity, in words that name the part that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("empty")]
    Empty,
    #[error("no digits in the number")]
    NoDigits,
    #[error(
        "unknown suffix {0:?} (use one of n u m k M G T P E Ki Mi Gi Ti Pi Ei, or an exponent e3)"
    )]
    Suffix(String),
}

/// Whether quantity `text` is less than, equal to or more than zero.
pub fn sign(text: &str) -> Result<Ordering, QuantityError> {
    if text.is_empty() {
        return Err(QuantityError::Empty);
    }
    let (negative, rest) = split_sign(text);
    let (nonzero, suffix) = number(rest)?;
    check_suffix(suffix)?;
    Ok(match (nonzero, negative) {
        (false, _) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (true, true) => Ordering::Less,
    })
}

fn split_sign(text: &str) -> (bool, &str) {
    match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    }
}

/// Reads `number` at the start of `s`: whether any digit is not zero, and
/// what follows it.
fn number(s: &str) -> Result<(bool, &str), QuantityError> {
    let mut dot = false;
    let end = s
        .find(|c: char| match c {
            '0'..='9' => false,
            // The first '.' is part of the number; a second ends it.
            '.' => std::mem::replace(&mut dot, true),
            _ => true,
        })
        .unwrap_or(s.len());
    let (number, rest) = s.split_at(end);
    if !number.bytes().any(|b| b.is_ascii_digit()) {
        return Err(QuantityError::NoDigits);
    }
    Ok((number.bytes().any(|b| matches!(b, b'1'..=b'9')), rest))
}

fn check_suffix(suffix: &str) -> Result<(), QuantityError> {
    const SI: [&str; 16] = [
        "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ];
    if SI.contains(&suffix) {
        return Ok(());
    }
    let bad = || QuantityError::Suffix(suffix.to_string());
    let exponent = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))
        .ok_or_else(bad)?;
    let (_, digits) = split_sign(exponent);
    let valid = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    valid.then_some(()).ok_or_else(bad)
}
