//! The `etcd://host:port,host:port/prefix` URL.

use crate::error::{Error, Result};

/// A parsed `etcd://[user:password@]host:port[,host:port…][/prefix]` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdUrl {
    /// `http://host:port` for each member given.
    pub endpoints: Vec<String>,
    /// The key prefix (one path segment; `cairndb` when the URL has none).
    pub prefix: String,
    /// User name and password, when the URL carries them.
    pub user: Option<(String, String)>,
}

/// The prefix used when the URL has no path.
pub const DEFAULT_PREFIX: &str = "cairndb";

impl EtcdUrl {
    /// Reads an `etcd://` URL.
    pub fn parse(url: &str) -> Result<EtcdUrl> {
        let bad = |reason: &str| Error::Url {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let rest = url
            .strip_prefix("etcd://")
            .ok_or_else(|| bad("it must start with etcd://"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let (user, hosts) = match authority.rfind('@') {
            Some(i) => {
                let (name, password) = authority[..i]
                    .split_once(':')
                    .ok_or_else(|| bad("credentials must be user:password@"))?;
                if name.is_empty() {
                    return Err(bad("the user name is empty"));
                }
                (
                    Some((name.to_string(), password.to_string())),
                    &authority[i + 1..],
                )
            }
            None => (None, authority),
        };
        let mut endpoints = Vec::new();
        for host in hosts.split(',') {
            let (name, port) = host
                .rsplit_once(':')
                .ok_or_else(|| bad(&format!("endpoint {host:?} must be host:port")))?;
            if name.is_empty() || name.contains(['/', '?', '#', ' ']) {
                return Err(bad(&format!("endpoint {host:?} has no valid host")));
            }
            port.parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| bad(&format!("endpoint {host:?} has no valid port")))?;
            endpoints.push(format!("http://{host}"));
        }
        let path = path.strip_suffix('/').unwrap_or(path);
        let prefix = if path.is_empty() {
            DEFAULT_PREFIX.to_string()
        } else {
            check_prefix(path).map_err(|reason| bad(&reason))?;
            path.to_string()
        };
        Ok(EtcdUrl {
            endpoints,
            prefix,
            user,
        })
    }
}

/// A prefix is one path segment of `[A-Za-z0-9._-]`, so that no prefix's
/// keys can fall under another's (FORMAT.md, "etcd key layout").
pub(crate) fn check_prefix(prefix: &str) -> std::result::Result<(), String> {
    if prefix.is_empty() || prefix.len() > 128 {
        return Err("the prefix must be 1 to 128 bytes".into());
    }
    if !prefix
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(format!(
            "the prefix {prefix:?} must be one path segment of letters, digits, '.', '_' and '-'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_endpoints_prefix_and_user() {
        let u = EtcdUrl::parse("etcd://127.0.0.1:2379,localhost:2380/app").unwrap();
        assert_eq!(
            u.endpoints,
            ["http://127.0.0.1:2379", "http://localhost:2380"]
        );
        assert_eq!(u.prefix, "app");
        assert_eq!(u.user, None);
        let u = EtcdUrl::parse("etcd://ann:s3:cret@h:1").unwrap();
        assert_eq!(u.prefix, DEFAULT_PREFIX);
        assert_eq!(u.user, Some(("ann".into(), "s3:cret".into())));
        assert_eq!(EtcdUrl::parse("etcd://h:1/app/").unwrap().prefix, "app");
    }

    #[test]
    fn refuses_malformed_urls_naming_the_fault() {
        for (url, needle) in [
            ("http://h:1/app", "etcd://"),
            ("etcd://h/app", "host:port"),
            ("etcd://h:0/app", "port"),
            ("etcd://h:99999/app", "port"),
            ("etcd://:1/app", "host"),
            ("etcd://h:1,/app", "host:port"),
            ("etcd://h:1/a/b", "one path segment"),
            ("etcd://h:1/a b", "one path segment"),
            ("etcd://:pw@h:1/a", "user name"),
            ("etcd://pw@h:1/a", "user:password"),
        ] {
            let e = EtcdUrl::parse(url).unwrap_err().to_string();
            assert!(e.contains(needle), "{url}: {e}");
        }
    }
}
