#[cfg(test)]
use super::Decider;

/// The shells `--max-unavailable` is counted in, as the binary starts them.
#[cfg(test)]
fn shells() -> Vec<Box<dyn Decider>> {
    vec![
        Box::new(super::regate::Regater::new()),
        Box::new(super::rules::RuleTainter::new()),
    ]
}

#[cfg(test)]
mod tests;
