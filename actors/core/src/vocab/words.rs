//! Enums whose every variant stands for one fixed word.

/// Declares an enum whose every variant stands for one fixed word, from one
/// list of `Variant = "word",` lines, with `ALL` (every variant, in order),
/// `as_str` (its word), `from_word` and `Display` (the word): the table
/// each such enum would otherwise write out three times. Exported: the
/// metrics' label enums use it too.
#[macro_export]
macro_rules! word_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $word:literal, )+
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in the order declared.
            pub const ALL: [$name; [$($word),+].len()] = [$($name::$variant),+];

            /// The word it stands for.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }

            /// The variant `word` stands for, if any.
            pub fn from_word(word: &str) -> Option<Self> {
                Self::ALL.into_iter().find(|v| v.as_str() == word)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
    // With `else "EXPECTED"` after the enum: also `FromStr`, which reads a
    // word with the space around it trimmed, and names what it expected.
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident { $($body:tt)* }
        else $expected:literal
    ) => {
        $crate::word_enum! { $(#[$meta])* $vis enum $name { $($body)* } }

        impl ::std::str::FromStr for $name {
            type Err = $crate::vocab::words::UnknownWord;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::from_word(s.trim()).ok_or_else(|| $crate::vocab::words::UnknownWord {
                    word: s.to_string(),
                    expected: $expected,
                })
            }
        }
    };
}
pub(crate) use word_enum;

/// A word no variant stands for, as written, and what was expected instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{word:?} is not {expected}")]
pub struct UnknownWord {
    pub word: String,
    pub expected: &'static str,
}
