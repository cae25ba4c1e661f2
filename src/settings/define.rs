//! The machinery behind the settings table (`table.rs`): the `settings!`
//! macro makes of each entry its flag (in `GateFlags` or `RunFlags`), its
//! config-file key (in [`FileConfig`](super::config::FileConfig)), its merged
//! value, the flag over the file over the default (in `GateGiven` or
//! `RunGiven`, with whether a person gave it), and its [`Setting`]: reload
//! class, documentation row and Helm value, as `tests/docs.rs` checks them.
//!
//! A plain `macro_rules!` table rather than a crate: confique and
//! clap-serde-derive layer a file under typed defaults but leave the clap
//! flags (or their defaults) to be written a second time, twelf and
//! ortho_config merge through serde values or figment (a flag's list would
//! no longer replace the file's, and the error messages users script
//! against would change), and none carries a reload class, a documentation
//! row or a Helm value. The table needs nothing but clap and serde.

use clap::builder::{Arg, ArgAction, ValueParser};

use super::table::HEADINGS;

/// How a setting takes effect when the config file is reloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// Applied at once with the rest of the gate configuration.
    Live,
    /// Read once at start: a changed value keeps its start value, and the
    /// reload names it as needing a restart.
    Restart,
    /// A file that changes it is refused whole (`criticalPods`).
    Refuse,
}

/// What one definition says about its setting: for `--help`, the
/// documentation's tables and the Helm chart.
#[derive(Debug, Clone)]
pub struct Setting {
    /// The long flag without `--`; `None` for a config-file-only key.
    pub flag: Option<&'static str>,
    /// The config file's key.
    pub key: &'static str,
    /// The help line as `--help` shows it.
    pub help: String,
    /// The default, as a person writes it; `None` when the setting has no
    /// value by default (a switch, or something off until given).
    pub default: Option<String>,
    /// The "default" column of the documentation's flag table.
    pub docs_default: String,
    /// The value of deploy/helm/nodegate/values.yaml that sets it, as a
    /// dotted path.
    pub helm: Option<&'static str>,
    pub reload: Reload,
    /// The flag's value name (`DURATION`, `KEY[:EFFECT]`, `N|P%`, ...):
    /// what kind of value it takes, for the chart's values schema.
    pub value: Option<&'static str>,
    /// How the flag takes its value; `One` for a config-file-only key.
    pub takes: Takes,
}

/// The help line of a flag, as clap's derive makes one from a doc comment:
/// the lines joined, the default appended, the final period dropped.
pub fn help(doc: &[&str], default: Option<&str>) -> String {
    let mut text = doc
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if let Some(d) = default {
        text.push_str(&format!(" Default: {d}."));
    }
    if text.ends_with('.') && !text.ends_with("..") {
        text.pop();
    }
    text
}

/// How a flag takes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// `--flag VALUE`, once.
    One,
    /// `--flag`, no value.
    Switch,
    /// `--flag VALUE`, repeatable.
    Many,
}

/// The clap argument of one flag, defined by `s`, under `heading`: the
/// last of [`HEADINGS`] at or before it.
pub fn arg(id: &'static str, s: &Setting, parser: ValueParser, heading: &mut &'static str) -> Arg {
    let flag = s.flag.unwrap_or(id);
    let section = HEADINGS.iter().find(|(first, _)| *first == flag);
    *heading = section.map_or(*heading, |&(_, h)| h);
    let arg = Arg::new(id)
        .long(flag)
        .help(s.help.clone())
        .value_name(s.value)
        .help_heading(*heading);
    match s.takes {
        Takes::One => arg.action(ArgAction::Set).value_parser(parser),
        Takes::Many => arg.action(ArgAction::Append).value_parser(parser),
        Takes::Switch => arg.action(ArgAction::SetTrue),
    }
}

/// Flags win over the file; a list given on the command line replaces the
/// file's list rather than adding to it. With neither, `default()`. Also
/// whether a person gave the list.
pub fn pick_list(
    flag: &[String],
    file: Option<Vec<String>>,
    default: impl FnOnce() -> Vec<String>,
) -> (Vec<String>, bool) {
    match (flag, file) {
        ([], None) => (default(), false),
        ([], Some(file)) => (file, true),
        (flag, _) => (flag.to_vec(), true),
    }
}

/// Defines the settings: one group of flags shared by every command that
/// reasons about placement (`gate`), one for `nodegate run` only (`run`),
/// and the config file's keys that have no flag (`file_only`). See
/// `table.rs` for the entries' shape.
macro_rules! settings {
    // --- the types of a setting, by kind -----------------------------------
    (@flag_ty switch) => { bool };
    (@flag_ty list $(($ty:ty))?) => { Vec<String> };
    (@flag_ty $kind:ident ($ty:ty)) => { Option<$ty> };
    (@file_ty switch) => { Option<bool> };
    (@file_ty list) => { Option<Vec<String>> };
    (@file_ty list ($ty:ty)) => { Option<Vec<$ty>> };
    (@file_ty $kind:ident ($ty:ty)) => { Option<$ty> };
    (@given_ty value ($ty:ty)) => { $ty };
    (@given_ty option ($ty:ty)) => { Option<$ty> };
    (@given_ty switch) => { bool };
    (@given_ty list $(($ty:ty))?) => { Vec<String> };

    // --- how a flag takes its value, and its parser -------------------------
    (@takes switch) => { $crate::settings::define::Takes::Switch };
    (@takes list) => { $crate::settings::define::Takes::Many };
    (@takes $kind:ident) => { $crate::settings::define::Takes::One };
    (@parser [$parser:expr] $($ty:ty)?) => { ::clap::builder::ValueParser::from($parser) };
    (@parser [] $ty:ty) => { ::clap::value_parser!($ty).into() };
    (@parser []) => { ::clap::builder::ValueParser::string() };
    // The Helm value: `config.` and the key, unless the entry names another.
    (@helm $key:literal) => { concat!("config.", $key) };
    (@helm $key:literal $helm:literal) => { $helm };

    // --- reading a flag from clap's matches ---------------------------------
    (@get switch, $m:ident, $id:expr) => { $m.get_flag($id) };
    (@get list $(($ty:ty))?, $m:ident, $id:expr) => {
        $m.get_many::<String>($id).map(|v| v.cloned().collect()).unwrap_or_default()
    };
    (@get $kind:ident ($ty:ty), $m:ident, $id:expr) => { $m.get_one::<$ty>($id).cloned() };

    // --- the default, typed and shown ---------------------------------------
    (@default value ($ty:ty) [$default:expr]) => { <$ty>::from($default) };
    (@default value ($ty:ty) []) => { compile_error!("a `value` setting needs a `default:`") };
    (@default list [$default:expr]) => {
        $default.into_iter().map(String::from).collect::<Vec<String>>()
    };
    (@default list $(($ty:ty))? []) => { Vec::<String>::new() };
    // A default as a person writes it on the command line.
    (@shown value ($ty:ty) [$default:expr]) => { Some(<$ty>::from($default).to_string()) };
    (@shown list [$default:expr]) => { Some(settings!(@default list [$default]).join(", ")) };
    (@shown $kind:ident $(($ty:ty))? []) => { None::<String> };

    // --- the flag over the file over the default ----------------------------
    (@merge value $(($ty:ty))? [$($d:expr)?], $flag:expr, $file:expr) => {{
        let (v, set) = settings!(@merge option [], $flag, $file);
        (v.unwrap_or_else(|| settings!(@default value $(($ty))? [$($d)?])), set)
    }};
    (@merge option $(($ty:ty))? [], $flag:expr, $file:expr) => {{
        let v = $flag.clone().or($file.take());
        let set = v.is_some();
        (v, set)
    }};
    (@merge switch [], $flag:expr, $file:expr) => {{
        let v = $flag || $file.take().unwrap_or(false);
        (v, v)
    }};
    (@merge list [$($d:expr)?], $flag:expr, $file:expr) => {
        $crate::settings::define::pick_list(&$flag, $file.take(), || {
            settings!(@default list [$($d)?])
        })
    };
    // A list whose file entries have their own shape: each is written as
    // the flag's string form (`String: From<$ty>`).
    (@merge list ($ty:ty) [], $flag:expr, $file:expr) => {{
        let file = $file.take().map(|v| v.into_iter().map(String::from).collect());
        $crate::settings::define::pick_list(&$flag, file, Vec::new)
    }};

    // --- one group of flags --------------------------------------------------
    (@group $flags:ident $given:ident $set:ident {
        $(
            $(#[doc = $doc:literal])*
            $field:ident: $kind:ident $(($ty:ty))? {
                flag: $flag:literal,
                $(value: $vn:literal,)?
                key: $key:literal,
                $(default: $default:expr,)?
                $(docs: $docs:literal,)?
                $(parser: $parser:expr,)?
                $(helm: $helm:literal,)?
                reload: $reload:ident $(,)?
            }
        )*
    }) => {
        /// The flags of this group as given on the command line (`None`,
        /// `false` or empty when not given).
        #[derive(Debug, Clone, Default)]
        pub struct $flags {
            $(
                $(#[doc = $doc])*
                pub $field: settings!(@flag_ty $kind $(($ty))?),
            )*
        }

        impl ::clap::Args for $flags {
            fn augment_args(cmd: ::clap::Command) -> ::clap::Command {
                let ids = [$(stringify!($field)),*];
                let parsers: [::clap::builder::ValueParser; _] =
                    [$(settings!(@parser [$($parser)?] $($ty)?)),*];
                let args = $given::definitions().into_iter().zip(ids).zip(parsers);
                let mut heading = "";
                args.fold(cmd, |cmd, ((s, id), parser)| {
                    cmd.arg($crate::settings::define::arg(id, &s, parser, &mut heading))
                })
            }

            fn augment_args_for_update(cmd: ::clap::Command) -> ::clap::Command {
                Self::augment_args(cmd)
            }
        }

        impl ::clap::FromArgMatches for $flags {
            fn from_arg_matches(m: &::clap::ArgMatches) -> Result<Self, ::clap::Error> {
                Ok($flags {
                    $($field: settings!(@get $kind $(($ty))?, m, stringify!($field)),)*
                })
            }

            fn update_from_arg_matches(&mut self, m: &::clap::ArgMatches) -> Result<(), ::clap::Error> {
                *self = Self::from_arg_matches(m)?;
                Ok(())
            }
        }

        /// Each setting of this group: the flag over the config file over
        /// the default.
        #[derive(Debug, Clone, PartialEq)]
        pub struct $given {
            $(pub $field: settings!(@given_ty $kind $(($ty))?),)*
            /// Which settings a person gave, by flag or in the file.
            pub set: $set,
        }

        /// Which settings of this group a person gave.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct $set {
            $(pub $field: bool,)*
        }

        impl $given {
            /// Takes this group's keys out of `file` and puts `flags` over
            /// them.
            pub fn merge(flags: &$flags, file: &mut $crate::settings::config::FileConfig) -> $given {
                let mut set = $set::default();
                $(
                    let $field = {
                        let (v, given) = settings!(
                            @merge $kind $(($ty))? [$($default)?], flags.$field, file.$field
                        );
                        set.$field = given;
                        v
                    };
                )*
                $given { $($field,)* set }
            }

            /// Every setting of this group at its default.
            pub fn defaults() -> $given {
                $given::merge(&$flags::default(), &mut $crate::settings::config::FileConfig::default())
            }

            /// The keys read once at start whose value differs in `new`.
            pub fn restart_changes(&self, new: &$given) -> Vec<&'static str> {
                use $crate::settings::define::Reload;
                let mut changed = Vec::new();
                $(
                    if Reload::$reload == Reload::Restart && self.$field != new.$field {
                        changed.push($key);
                    }
                )*
                changed
            }

            /// Each setting of this group as given, by its config-file key.
            pub fn shown(&self) -> ::serde_json::Map<String, ::serde_json::Value> {
                let mut shown = ::serde_json::Map::new();
                $(shown.insert($key.to_string(), ::serde_json::json!(self.$field));)*
                shown
            }

            /// What each definition of this group says.
            pub fn definitions() -> Vec<$crate::settings::define::Setting> {
                vec![$(
                    {
                        let default = settings!(@shown $kind $(($ty))? [$($default)?]);
                        let docs_default = match None::<&str>$(.or(Some($docs)))? {
                            Some(words) => words.to_string(),
                            None => default.as_ref().map_or("none".into(), |d| format!("`{d}`")),
                        };
                        $crate::settings::define::Setting {
                            flag: Some($flag),
                            key: $key,
                            help: $crate::settings::define::help(&[$($doc),*], default.as_deref()),
                            docs_default,
                            default,
                            helm: Some(settings!(@helm $key $($helm)?)),
                            reload: $crate::settings::define::Reload::$reload,
                            value: None$(.or(Some($vn)))?,
                            takes: settings!(@takes $kind),
                        }
                    },
                )*]
            }
        }
    };

    // --- the whole table -----------------------------------------------------
    (
        gate $gflags:ident $ggiven:ident $gset:ident { $($gate:tt)* }
        run $rflags:ident $rgiven:ident $rset:ident { $($run:tt)* }
        file_only {
            $(
                $(#[doc = $fdoc:literal])*
                $ffield:ident: $fty:ty => $fkey:literal {
                    docs: $fdocs:literal,
                    $(helm: $fhelm:literal,)?
                    reload: $freload:ident $(,)?
                }
            )*
        }
    ) => {
        settings!(@group $gflags $ggiven $gset { $($gate)* });
        settings!(@group $rflags $rgiven $rset { $($run)* });
        settings!(@file [$($gate)* $($run)*] {
            $( $(#[doc = $fdoc])* $ffield: $fty => $fkey, )*
        });

        fn file_only_definitions() -> Vec<$crate::settings::define::Setting> {
            vec![$(
                $crate::settings::define::Setting {
                    flag: None,
                    key: $fkey,
                    help: $crate::settings::define::help(&[$($fdoc),*], None),
                    default: None,
                    docs_default: $fdocs.to_string(),
                    helm: Some(settings!(@helm $fkey $($fhelm)?)),
                    reload: $crate::settings::define::Reload::$freload,
                    value: None,
                    takes: $crate::settings::define::Takes::One,
                },
            )*]
        }
    };

    // --- the config file: every group's keys and the file-only ones ---------
    (@file [
        $(
            $(#[doc = $doc:literal])*
            $field:ident: $kind:ident $(($ty:ty))? {
                flag: $flag:literal, $(value: $vn:literal,)? key: $key:literal, $($rest:tt)*
            }
        )*
    ] {
        $( $(#[doc = $fdoc:literal])* $ffield:ident: $fty:ty => $fkey:literal, )*
    }) => {
        /// The config file. Keys mirror the flags, in camelCase; an unknown
        /// key is an error so that a typo never silently falls back to a
        /// default.
        #[derive(Debug, Default, ::serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct FileConfig {
            $(
                #[serde(rename = $key)]
                pub $field: settings!(@file_ty $kind $(($ty))?),
            )*
            $(
                $(#[doc = $fdoc])*
                #[serde(rename = $fkey)]
                pub $ffield: Option<$fty>,
            )*
        }
    };
}
