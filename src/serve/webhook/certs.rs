//! The self-managed certificates: what nodegate issues (a CA and a serving
//! certificate), what it reads back from its Secret, and when it renews them,
//! the last as a pure function of what is stored and `now`.
//!
//! `now` is the API server's clock as far as nodegate has evidence of it
//! (`cluster::server_time`), never this replica's own: the API server is the
//! one that checks notBefore and notAfter. A renewed CA is put in front of
//! the bundle (`ca.crt`) and the old one stays behind it until it expires,
//! so the webhook configuration's caBundle trusts both.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use x509_parser::extensions::GeneralName;

/// The Secret's keys.
pub const TLS_CRT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const CA_CRT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";

/// How far back a new certificate's notBefore is set (seconds): the API
/// server's clock may be a little ahead of the evidence nodegate has of it.
pub const BACKDATE: i64 = 3600;

/// How far past the API server's now a stored certificate's notBefore may
/// lie and still be used (seconds): the evidence of the server's clock lags
/// the clock by a request's latency and a second of precision.
pub const NOT_BEFORE_SLACK: i64 = 10;

/// How many older CAs a bundle keeps behind the signing one, at most.
pub const MAX_OLD_CAS: usize = 4;

/// How much longer than a serving certificate the CA lives.
pub const CA_LIFETIMES: u32 = 10;

/// How long a new CA must have been in the bundle before it signs a renewed
/// serving certificate: a sixth of the serving validity, 10 s to 1 h. Every
/// replica must have written the new bundle into the webhook configuration,
/// and the API server reloaded it, before a certificate that needs it is
/// served.
pub fn settle(validity: Duration) -> Duration {
    (validity / 6).clamp(Duration::from_secs(10), Duration::from_secs(3600))
}

/// What nodegate needs to know of one certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFacts {
    pub not_before: i64,
    pub not_after: i64,
    /// DNS names and IP addresses, as written in `--webhook-host`.
    pub sans: BTreeSet<String>,
    pub subject: Vec<u8>,
    pub issuer: Vec<u8>,
}

/// What is in the Secret, read and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The bundle, signing CA first.
    pub cas: Vec<CertFacts>,
    /// `ca.key` parses and is the first CA's key.
    pub ca_key_matches: bool,
    pub serving: Option<CertFacts>,
    /// `tls.key` parses and is the serving certificate's key.
    pub serving_key_matches: bool,
}

/// What to do with the Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Good as it is.
    Keep,
    /// Serving due, but the newest CA is too recent to sign: wait.
    Wait,
    /// A new CA and serving certificate: nothing usable is stored.
    Fresh(String),
    /// Put a new CA in front of the bundle; keep the serving certificate.
    RotateCa(String),
    /// A new serving certificate from the current CA.
    Reissue(String),
}

/// The decision for `stored` at `now` (Unix seconds). The CA and the
/// serving certificate are each renewed when less than a third of their
/// lifetime remains.
pub fn decide(
    stored: Option<&Stored>,
    now: i64,
    validity: Duration,
    hosts: &BTreeSet<String>,
) -> Decision {
    let v = secs(validity);
    let ca_v = v.saturating_mul(i64::from(CA_LIFETIMES));
    let Some(s) = stored else {
        return Decision::Fresh("the Secret holds no certificates yet".into());
    };
    let Some(ca) = s.cas.first() else {
        return Decision::Fresh("the Secret has no CA".into());
    };
    if !s.ca_key_matches {
        return Decision::Fresh("the Secret's ca.key is missing or not the CA's key".into());
    }
    if ca.not_after <= now {
        return Decision::Fresh("the CA has expired".into());
    }
    if let Some(ahead) = not_yet_valid(ca, now) {
        return Decision::Fresh(format!(
            "the CA is not valid for another {ahead}s by the API server's clock (issued on a clock that ran ahead)"
        ));
    }
    if ca.not_after - now < ca_v / 3 {
        return Decision::RotateCa(format!("the CA expires in {}s", ca.not_after - now));
    }
    let Some(serving) = s.serving.as_ref().filter(|_| s.serving_key_matches) else {
        return Decision::Reissue("no usable serving certificate and key".into());
    };
    if serving.not_after <= now {
        return Decision::Reissue("the serving certificate has expired".into());
    }
    if let Some(ahead) = not_yet_valid(serving, now) {
        return Decision::Reissue(format!(
            "the serving certificate is not valid for another {ahead}s by the API server's clock (issued on a clock that ran ahead)"
        ));
    }
    if !s.cas.iter().any(|c| c.subject == serving.issuer) {
        return Decision::Reissue("the serving certificate's CA is not in the bundle".into());
    }
    let (left, sans) = (serving.not_after - now, &serving.sans);
    let why = if left < v / 3 {
        format!("the serving certificate expires in {left}s")
    } else if sans != hosts {
        format!("the serving certificate covers {sans:?}, not {hosts:?}")
    } else {
        return Decision::Keep;
    };
    if now - (ca.not_before + BACKDATE) < secs(settle(validity)) && serving.issuer != ca.subject {
        return Decision::Wait;
    }
    Decision::Reissue(why)
}

/// How many seconds `c`'s notBefore lies after `now`, when more than
/// [`NOT_BEFORE_SLACK`].
fn not_yet_valid(c: &CertFacts, now: i64) -> Option<i64> {
    let ahead = c.not_before.saturating_sub(now);
    (ahead > NOT_BEFORE_SLACK).then_some(ahead)
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX / 100)
}

/// The four PEM texts the Secret holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Material {
    pub ca_crt: String,
    pub ca_key: String,
    pub tls_crt: String,
    pub tls_key: String,
}

/// Reads the Secret's data: `None` when any of the four is missing or the
/// certificates do not parse.
pub fn read(ca_crt: &[u8], ca_key: &[u8], tls_crt: &[u8], tls_key: &[u8]) -> Option<Stored> {
    let cas = parse_all(ca_crt)?;
    let ca_key = std::str::from_utf8(ca_key).ok()?;
    let serving = parse_all(tls_crt).and_then(|v| v.into_iter().next());
    let matches = |key: Option<&str>, cert: Option<&(CertFacts, Vec<u8>)>| match (
        key.map(KeyPair::from_pem),
        cert,
    ) {
        (Some(Ok(k)), Some((_, spki))) => k.public_key_raw() == spki.as_slice(),
        _ => false,
    };
    Some(Stored {
        ca_key_matches: matches(Some(ca_key), cas.first()),
        serving_key_matches: matches(std::str::from_utf8(tls_key).ok(), serving.as_ref()),
        cas: cas.into_iter().map(|(f, _)| f).collect(),
        serving: serving.map(|(f, _)| f),
    })
}

/// Every certificate in a PEM text, with its public key bits; `None` if one
/// does not parse or there is none.
fn parse_all(pem: &[u8]) -> Option<Vec<(CertFacts, Vec<u8>)>> {
    let mut out = Vec::new();
    for p in x509_parser::pem::Pem::iter_from_buffer(pem) {
        let p = p.ok()?;
        let cert = p.parse_x509().ok()?;
        let names = cert.subject_alternative_name().ok().flatten();
        let sans = names
            .iter()
            .flat_map(|ext| &ext.value.general_names)
            .filter_map(|name| match name {
                GeneralName::DNSName(d) => Some(d.to_string()),
                // Four bytes or sixteen; any other length is no address.
                GeneralName::IPAddress(b) => <[u8; 4]>::try_from(*b)
                    .map(IpAddr::from)
                    .or_else(|_| <[u8; 16]>::try_from(*b).map(IpAddr::from))
                    .ok()
                    .map(|ip| ip.to_string()),
                _ => None,
            })
            .collect();
        out.push((
            CertFacts {
                not_before: cert.validity().not_before.timestamp(),
                not_after: cert.validity().not_after.timestamp(),
                sans,
                subject: cert.subject().as_raw().to_vec(),
                issuer: cert.issuer().as_raw().to_vec(),
            },
            cert.public_key().subject_public_key.data.to_vec(),
        ));
    }
    (!out.is_empty()).then_some(out)
}

/// The hosts as the certificate will list them (IP addresses normalized).
pub fn host_set(hosts: &[String]) -> BTreeSet<String> {
    hosts
        .iter()
        .map(|h| {
            h.parse::<IpAddr>()
                .map_or_else(|_| h.clone(), |ip| ip.to_string())
        })
        .collect()
}

/// Certificate parameters for the common name `cn`, valid from
/// [`BACKDATE`] before `now` to `lifetime` seconds after it.
fn params(cn: String, now: i64, lifetime: i64) -> Result<CertificateParams, String> {
    let at = |unix: i64| {
        time::OffsetDateTime::from_unix_timestamp(unix).map_err(|e| format!("time {unix}: {e}"))
    };
    let mut p = CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.not_before = at(now.saturating_sub(BACKDATE))?;
    p.not_after = at(now.saturating_add(lifetime))?;
    Ok(p)
}

/// A new CA: its certificate and key in PEM.
pub fn new_ca(now: i64, validity: Duration) -> Result<(String, String), String> {
    let key = KeyPair::generate().map_err(|e| format!("generating the CA key: {e}"))?;
    let lifetime = secs(validity).saturating_mul(i64::from(CA_LIFETIMES));
    let mut p = params(format!("nodegate webhook CA {now}"), now, lifetime)?;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = p
        .self_signed(&key)
        .map_err(|e| format!("signing the CA: {e}"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A serving certificate for `hosts`, signed by the CA (`ca_crt` is the
/// signing CA's PEM, the first of a bundle), valid `validity` from now.
pub fn new_serving(
    ca_crt: &str,
    ca_key: &str,
    hosts: &[String],
    now: i64,
    validity: Duration,
) -> Result<(String, String), String> {
    let ca_key = KeyPair::from_pem(ca_key).map_err(|e| format!("reading ca.key: {e}"))?;
    let first = pem_blocks(ca_crt)
        .next()
        .ok_or("ca.crt holds no certificate")?;
    let issuer =
        Issuer::from_ca_cert_pem(&first, ca_key).map_err(|e| format!("reading ca.crt: {e}"))?;
    let cn = hosts.first().cloned().unwrap_or_else(|| "nodegate".into());
    let mut p = params(cn, now, secs(validity))?;
    p.subject_alt_names = hosts
        .iter()
        .map(|h| match h.parse::<IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => h
                .clone()
                .try_into()
                .map(SanType::DnsName)
                .map_err(|e| format!("--webhook-host {h:?}: {e}")),
        })
        .collect::<Result<_, _>>()?;
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate().map_err(|e| format!("generating the serving key: {e}"))?;
    let cert = p
        .signed_by(&key, &issuer)
        .map_err(|e| format!("signing the serving certificate: {e}"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The PEM certificate blocks of a bundle, in order, each ending in a
/// newline.
fn pem_blocks(bundle: &str) -> impl Iterator<Item = String> + '_ {
    const END: &str = "-----END CERTIFICATE-----";
    let mut rest = bundle;
    std::iter::from_fn(move || {
        let start = rest.find("-----BEGIN CERTIFICATE-----")?;
        let end = rest[start..].find(END)? + start + END.len();
        let block = format!("{}\n", &rest[start..end]);
        rest = &rest[end..];
        Some(block)
    })
}

/// The certificates of `bundle` valid at `now` (not expired, not dated
/// ahead beyond the slack), in order, at most `max` of them.
fn unexpired(bundle: &str, now: i64, max: usize) -> String {
    pem_blocks(bundle)
        .filter(|block| {
            let first = parse_all(block.as_bytes()).and_then(|v| v.into_iter().next());
            first.is_some_and(|(f, _)| f.not_after > now && not_yet_valid(&f, now).is_none())
        })
        .take(max)
        .collect()
}

/// Carries out `decision` on what is stored (`old`, when there is
/// anything): the new Secret data, or `None` for Keep and Wait.
pub fn carry_out(
    decision: &Decision,
    old: Option<&Material>,
    hosts: &[String],
    now: i64,
    validity: Duration,
) -> Result<Option<Material>, String> {
    let fresh = || -> Result<Material, String> {
        let (ca_crt, ca_key) = new_ca(now, validity)?;
        let (tls_crt, tls_key) = new_serving(&ca_crt, &ca_key, hosts, now, validity)?;
        Ok(Material {
            ca_crt,
            ca_key,
            tls_crt,
            tls_key,
        })
    };
    Ok(match (decision, old) {
        (Decision::Keep | Decision::Wait, _) => None,
        (_, None) => Some(fresh()?),
        // The old CAs still valid stay trusted: the replicas that still
        // serve a certificate they signed keep being answered.
        (Decision::Fresh(_), Some(old)) => {
            let new = fresh()?;
            Some(Material {
                ca_crt: format!("{}{}", new.ca_crt, unexpired(&old.ca_crt, now, MAX_OLD_CAS)),
                ..new
            })
        }
        (Decision::RotateCa(_), Some(old)) => {
            let (ca_crt, ca_key) = new_ca(now, validity)?;
            Some(Material {
                ca_crt: format!("{ca_crt}{}", unexpired(&old.ca_crt, now, MAX_OLD_CAS)),
                ca_key,
                ..old.clone()
            })
        }
        (Decision::Reissue(_), Some(old)) => {
            let (tls_crt, tls_key) = new_serving(&old.ca_crt, &old.ca_key, hosts, now, validity)?;
            Some(Material {
                ca_crt: unexpired(&old.ca_crt, now, MAX_OLD_CAS + 1),
                tls_crt,
                tls_key,
                ..old.clone()
            })
        }
    })
}

#[cfg(test)]
mod tests;
