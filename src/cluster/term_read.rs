//! One read per leadership term, shared by whoever asks for it: each
//! budgeted decider (closing, replace) waits after this replica gains the
//! lease until the index shows every node at least at the version a fresh
//! LIST returns, and they ask within moments of each other. A read made in
//! an earlier term is never handed out, since another leader may have
//! written in between; a failed read is not kept, so the next caller tries
//! again.

use std::future::Future;

use tokio::sync::Mutex;

/// The last successful read, with the term it was made in.
pub struct TermRead<T> {
    last: Mutex<Option<(u64, T)>>,
}

impl<T> Default for TermRead<T> {
    fn default() -> Self {
        TermRead {
            last: Mutex::new(None),
        }
    }
}

impl<T: Clone> TermRead<T> {
    /// The read made in `term`, or (none yet) what `read` answers now. A
    /// caller that arrives while a read is under way waits for it rather
    /// than making its own.
    pub async fn get<E, F>(&self, term: u64, read: impl FnOnce() -> F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        let mut last = self.last.lock().await;
        if let Some((made_in, value)) = last.as_ref()
            && *made_in == term
        {
            return Ok(value.clone());
        }
        let value = read().await?;
        *last = Some((term, value.clone()));
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    async fn counted(reads: &AtomicUsize) -> Result<usize, String> {
        tokio::task::yield_now().await;
        Ok(reads.fetch_add(1, Ordering::SeqCst) + 1)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn callers_in_one_term_share_one_read_and_a_new_term_reads_again() {
        let shared = Arc::new(TermRead::default());
        let reads = Arc::new(AtomicUsize::new(0));
        let ask = |term: u64| {
            let shared = Arc::clone(&shared);
            let reads = Arc::clone(&reads);
            tokio::spawn(async move { shared.get(term, || counted(&reads)).await })
        };
        let (a, b, c) = (ask(1), ask(1), ask(1));
        for answer in [a, b, c] {
            assert_eq!(answer.await.expect("joined"), Ok(1), "the first read");
        }
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        assert_eq!(ask(2).await.expect("joined"), Ok(2), "a new term reads");
        assert_eq!(ask(2).await.expect("joined"), Ok(2));
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_read_is_not_kept() {
        let shared: TermRead<u32> = TermRead::default();
        let failed: Result<u32, &str> = shared.get(1, || async { Err("refused") }).await;
        assert_eq!(failed, Err("refused"));
        assert_eq!(shared.get(1, || async { Ok::<_, &str>(7) }).await, Ok(7));
        assert_eq!(
            shared.get(1, || async { Ok::<_, &str>(8) }).await,
            Ok(7),
            "kept for the term"
        );
    }
}
