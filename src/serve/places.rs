//! The places of one listener, and who holds them. Besides the total cap,
//! a cap per remote address keeps one pod from taking every place;
//! loopback connections (the pod's own, such as `nodegate probe`) count
//! against neither and have [`Caps::loopback_reserve`] places beyond them,
//! so no remote client can starve the probes. A remote connection beyond a
//! cap may take the place of one idle between requests: of its own address,
//! or, beyond the total cap, of an address holding at least half the
//! per-address cap and two more than its own. Otherwise it is refused.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Context;

use futures::task::AtomicWaker;
use tokio::time::Instant;

/// How many connections one listener admits.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// Connections at once from remote addresses.
    pub max_connections: usize,
    /// Connections at once from one remote address.
    pub max_per_peer: usize,
    /// Places for loopback connections beyond `max_connections`.
    pub loopback_reserve: usize,
    /// Whether loopback connections are exempt from the caps (always, but
    /// for tests that need two distinct peers on one machine).
    pub loopback_exempt: bool,
}

impl Caps {
    /// The caps of every listener.
    pub const DEFAULT: Caps = Caps {
        max_connections: 1024,
        max_per_peer: 64,
        loopback_reserve: 64,
        loopback_exempt: true,
    };
}

/// The places taken, by remote address and in all, and the connections
/// holding them.
#[derive(Debug, Default)]
struct Taken {
    remote: usize,
    loopback: usize,
    by_peer: HashMap<IpAddr, usize>,
    /// Every connection with a place, by its number.
    held: HashMap<u64, Held>,
    next: u64,
}

/// What the listener knows of one connection with a place.
#[derive(Debug)]
struct Held {
    /// The remote address, `None` for loopback.
    peer: Option<IpAddr>,
    /// Since when it has waited, answered, for its next request.
    idle_since: Option<Instant>,
    notice: Arc<Notice>,
}

/// How a connection learns that it gave its place to another.
#[derive(Debug, Default)]
struct Notice {
    given: AtomicBool,
    waker: AtomicWaker,
}

/// An idle connection closed for a new one: its address, and since when it
/// was idle.
#[derive(Debug, PartialEq, Eq)]
pub struct Displaced {
    pub peer: IpAddr,
    pub idle_since: Instant,
}

impl Taken {
    /// Gives back the counts of a place that `peer` held.
    fn release(&mut self, peer: Option<IpAddr>) {
        match peer {
            None => self.loopback = self.loopback.saturating_sub(1),
            Some(ip) => {
                self.remote = self.remote.saturating_sub(1);
                if let Some(n) = self.by_peer.get_mut(&ip) {
                    *n -= 1;
                    if *n == 0 {
                        self.by_peer.remove(&ip);
                    }
                }
            }
        }
    }

    /// Closes an idle remote connection so that `newcomer` can have its
    /// place, and takes the place back: one of the newcomer's own address,
    /// or (with `heavy`) of an address holding at least `heavy` places and
    /// two more than the newcomer's (so that it keeps at least the
    /// newcomer's share). The address holding the most goes first, then the
    /// connection idle the longest.
    fn evict(&mut self, newcomer: IpAddr, heavy: Option<usize>) -> Option<Displaced> {
        let have = self.by_peer.get(&newcomer).copied().unwrap_or(0);
        let places = |peer: &IpAddr| self.by_peer.get(peer).copied().unwrap_or(0);
        let least = heavy.map(|heavy| heavy.max(have + 2));
        let (_, since, id, peer) = self
            .held
            .iter()
            .filter_map(|(&id, h)| Some((h.peer?, h.idle_since?, id)))
            .filter(|(peer, _, _)| {
                *peer == newcomer || least.is_some_and(|least| places(peer) >= least)
            })
            .map(|(peer, since, id)| (places(&peer), since, id, peer))
            .min_by_key(|&(n, since, _, _)| (std::cmp::Reverse(n), since))?;
        let held = self.held.remove(&id)?;
        held.notice.given.store(true, Ordering::Release);
        held.notice.waker.wake();
        self.release(Some(peer));
        Some(Displaced {
            peer,
            idle_since: since,
        })
    }
}

/// A place held by one connection, given back on drop (or taken back when
/// the connection gives it to a newer one).
pub struct Place {
    taken: Arc<Mutex<Taken>>,
    id: u64,
    notice: Arc<Notice>,
}

impl Place {
    /// A place in a book of its own, for a connection served outside an
    /// accept loop (tests).
    #[cfg(test)]
    pub fn alone() -> Place {
        Book::new(Caps::DEFAULT)
            .take(IpAddr::from([127, 0, 0, 1]))
            .map(|(place, _)| place)
            .unwrap_or_else(|why| panic!("a place in an empty book: {why}"))
    }

    /// Marks the connection idle since `since`, or busy (`None`).
    pub fn idle(&self, since: Option<Instant>) {
        let Ok(mut t) = self.taken.lock() else { return };
        if let Some(held) = t.held.get_mut(&self.id) {
            held.idle_since = since;
        }
    }

    /// Whether the connection gave its place to a newer one; if not, `cx`
    /// is woken when it does.
    pub fn given(&self, cx: &Context<'_>) -> bool {
        self.notice.waker.register(cx.waker());
        self.was_given()
    }

    /// Whether the connection gave its place to a newer one.
    pub fn was_given(&self) -> bool {
        self.notice.given.load(Ordering::Acquire)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let Ok(mut t) = self.taken.lock() else { return };
        if let Some(held) = t.held.remove(&self.id) {
            t.release(held.peer);
        }
    }
}

/// The words for a listener that is full.
pub const FULL: &str = "too many connections at once";
pub const PEER_FULL: &str = "too many connections from one address";

/// One listener's book: its caps, and the places taken.
pub struct Book {
    taken: Arc<Mutex<Taken>>,
    caps: Caps,
}

impl Book {
    /// An empty book with these caps.
    pub fn new(caps: Caps) -> Book {
        Book {
            taken: Arc::new(Mutex::new(Taken::default())),
            caps,
        }
    }

    /// The caps it keeps.
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// Connections holding a place (tests).
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.taken.lock().map(|t| t.held.len()).unwrap_or(0)
    }

    /// A place for a connection from `peer`, or why there is none. A remote
    /// connection that finds the listener full may take the place of an
    /// idle one ([`Taken::evict`]): of its own address, or, when the
    /// listener is full, of an address holding at least half the
    /// per-address cap and two more than its own. A few addresses holding
    /// many connections cannot keep a new one out, and a client holding
    /// fewer (the API server keeps up to 25 idle) keeps them. Many
    /// addresses holding a few each still can: only a NetworkPolicy stops
    /// those. What it displaced is returned, to be logged.
    pub fn take(&self, peer: IpAddr) -> Result<(Place, Option<Displaced>), &'static str> {
        let caps = &self.caps;
        let mut t = self
            .taken
            .lock()
            .map_err(|_| "the listener's count is poisoned")?;
        let loopback = caps.loopback_exempt && peer.to_canonical().is_loopback();
        let mut displaced = None;
        let peer = if loopback {
            if t.loopback >= caps.loopback_reserve + caps.max_connections.saturating_sub(t.remote) {
                return Err(FULL);
            }
            t.loopback += 1;
            None
        } else {
            if t.by_peer.get(&peer).copied().unwrap_or(0) >= caps.max_per_peer {
                displaced = Some(t.evict(peer, None).ok_or(PEER_FULL)?);
            }
            if t.remote + t.loopback.saturating_sub(caps.loopback_reserve) >= caps.max_connections {
                let heavy = caps.max_per_peer.div_ceil(2);
                displaced = Some(t.evict(peer, Some(heavy)).ok_or(FULL)?);
            }
            *t.by_peer.entry(peer).or_insert(0) += 1;
            t.remote += 1;
            Some(peer)
        };
        let id = t.next;
        t.next += 1;
        let notice = Arc::new(Notice::default());
        let held = Held {
            peer,
            idle_since: None,
            notice: Arc::clone(&notice),
        };
        t.held.insert(id, held);
        let taken = Arc::clone(&self.taken);
        Ok((Place { taken, id, notice }, displaced))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an IP address")
    }

    #[test]
    fn one_peer_cannot_take_every_place_and_loopback_always_has_one() {
        let book = Book::new(Caps {
            max_connections: 6,
            max_per_peer: 2,
            loopback_reserve: 1,
            ..Caps::DEFAULT
        });
        let mut held = Vec::new();
        // One pod: two places, then refused; others still get theirs.
        for _ in 0..2 {
            held.push(book.take(ip("10.0.0.9")).expect("within the peer cap"));
        }
        assert_eq!(
            book.take(ip("10.0.0.9")).err(),
            Some("too many connections from one address")
        );
        for peer in ["10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"] {
            held.push(book.take(ip(peer)).expect("within the caps"));
        }
        // Every remote place is taken: a new address is refused, the pod's
        // own loopback (the probe) is not, up to the reserve.
        assert_eq!(
            book.take(ip("10.0.0.3")).err(),
            Some("too many connections at once")
        );
        let probe = book.take(ip("127.0.0.1")).expect("the reserve");
        assert!(book.take(ip("::1")).is_err(), "beyond the reserve");
        // Places come back on drop.
        drop(probe);
        held.truncate(1);
        assert!(book.take(ip("10.0.0.3")).is_ok());
        let t = book.taken.lock().expect("lock");
        assert_eq!((t.remote, t.loopback), (1, 0), "{t:?}");
        assert_eq!(t.by_peer.get(&ip("10.0.0.9")), Some(&1), "{t:?}");
    }

    /// A book with these caps (and one place for loopback).
    fn book(max_connections: usize, max_per_peer: usize) -> Book {
        Book::new(Caps {
            max_connections,
            max_per_peer,
            loopback_reserve: 1,
            ..Caps::DEFAULT
        })
    }

    /// Whether the connection holding `place` was told to give it up.
    fn given(place: &Place) -> bool {
        place.was_given()
    }

    #[test]
    fn a_full_listener_gives_an_idle_place_of_the_largest_holder_to_a_new_connection() {
        let book = book(4, 2);
        let place = |peer: &str| book.take(ip(peer));
        // A (10.0.0.1) holds two places, B and C one each: the cap.
        let (a1, _) = place("10.0.0.1").expect("a place");
        let (a2, _) = place("10.0.0.1").expect("a place");
        let (b, _) = place("10.0.0.2").expect("a place");
        let (c, _) = place("10.0.0.3").expect("a place");
        let (probe, _) = place("127.0.0.1").expect("the reserve");
        // Every connection busy (a head or an answer under way): refused.
        assert_eq!(place("10.0.0.4").err(), Some(FULL));
        assert_eq!(place("10.0.0.1").err(), Some(PEER_FULL));
        // Idle: the probe longest (loopback has its own places and is never
        // displaced), then b, c, a2, a1.
        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        probe.idle(Some(t0));
        b.idle(Some(at(1)));
        c.idle(Some(at(2)));
        a2.idle(Some(at(3)));
        a1.idle(Some(at(4)));
        let gone = |peer, secs| Displaced {
            peer: ip(peer),
            idle_since: at(secs),
        };
        // A newcomer takes a place of A, which holds two more than it, A's
        // idle the longest; not b, idle longer, whose address holds one.
        let (d, displaced) = place("10.0.0.4").expect("a place of A's");
        assert_eq!(displaced, Some(gone("10.0.0.1", 3)));
        assert!(given(&a2) && !given(&a1) && !given(&b) && !given(&c) && !given(&probe));
        // Now every address holds one: the next newcomer takes no one's
        // place, though three are idle.
        assert_eq!(place("10.0.0.5").err(), Some(FULL));
        assert!(!given(&a1) && !given(&b) && !given(&c));
        // But an address may always give its own idle place to itself.
        d.idle(Some(at(5)));
        let (_d2, displaced) = place("10.0.0.4").expect("d's place");
        assert_eq!(displaced, Some(gone("10.0.0.4", 5)));
        assert!(given(&d) && !given(&b));
        // Places given away are not given back twice.
        drop((a2, d));
        {
            let t = book.taken.lock().expect("lock");
            assert_eq!((t.remote, t.loopback, t.held.len()), (4, 1, 5), "{t:?}");
            assert_eq!(t.by_peer.get(&ip("10.0.0.1")), Some(&1), "{t:?}");
            assert_eq!(t.by_peer.get(&ip("10.0.0.4")), Some(&1), "{t:?}");
        }
        drop((a1, b, c, probe));
        let t = book.taken.lock().expect("lock");
        assert_eq!((t.remote, t.loopback, t.held.len()), (1, 0, 1), "{t:?}");
    }

    #[test]
    fn an_address_at_its_cap_gives_only_its_own_idle_place() {
        let book = book(10, 2);
        let place = |peer: &str| book.take(ip(peer));
        let (a1, _) = place("10.0.0.1").expect("a place");
        let (a2, _) = place("10.0.0.1").expect("a place");
        let (b, _) = place("10.0.0.2").expect("a place");
        let t0 = Instant::now();
        b.idle(Some(t0));
        // A's own are busy: refused, b untouched.
        assert_eq!(place("10.0.0.1").err(), Some(PEER_FULL));
        a2.idle(Some(t0 + Duration::from_secs(1)));
        let (_a3, displaced) = place("10.0.0.1").expect("a2's place");
        let a2_gone = Displaced {
            peer: ip("10.0.0.1"),
            idle_since: t0 + Duration::from_secs(1),
        };
        assert_eq!(displaced, Some(a2_gone));
        assert!(given(&a2) && !given(&a1) && !given(&b));
    }

    #[test]
    fn a_full_listener_takes_idle_places_only_from_an_address_holding_half_its_cap() {
        let book = book(7, 8);
        let place = |peer: &str| book.take(ip(peer));
        let t0 = Instant::now();
        // A holds three places (like an API server keeping a few), B four
        // (half the per-address cap); all idle, A's the longest.
        let mut held = Vec::new();
        for (i, peer) in [
            "10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2", "10.0.0.2", "10.0.0.2",
        ]
        .into_iter()
        .enumerate()
        {
            let (p, _) = place(peer).expect("within the caps");
            p.idle(Some(t0 + Duration::from_secs(i as u64)));
            held.push(p);
        }
        let (_c, displaced) = place("10.0.0.3").expect("a place of B's");
        assert_eq!(displaced.map(|d| d.peer), Some(ip("10.0.0.2")));
        assert!(
            held[..3].iter().all(|p| !given(p)),
            "A, below half the cap, lost a place"
        );
        assert_eq!(held.iter().filter(|p| given(p)).count(), 1);
        // B now holds three: no address holds half the cap, none gives.
        assert_eq!(place("10.0.0.4").err(), Some(FULL));
        assert_eq!(held.iter().filter(|p| given(p)).count(), 1);
    }
}
