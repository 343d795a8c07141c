//! What the models' seeded defects share: each model declares its mutants
//! with [`mutants!`], which gives them their command-line names, the list of
//! every one (`ALL`, in declaration order), `Display`, and `FromStr` with an
//! error that lists the known names.

/// Declares a model's mutant enum, each variant with its command-line name,
/// and the error of parsing a name that does not exist:
///
/// ```ignore
/// mutants! {
///     /// A seeded defect.
///     pub enum Mutant, unknown UnknownMutant ("mutant") {
///         /// The acknowledgement does not check the lease token.
///         AckWithoutToken = "ack-without-token",
///     }
/// }
/// ```
macro_rules! mutants {
    (
        $(#[$meta:meta])*
        pub enum $name:ident, unknown $unknown:ident ($kind:literal) {
            $( $(#[$variant_meta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$variant_meta])* $variant, )+
        }

        impl $name {
            /// Every mutant.
            pub const ALL: [Self; [$(stringify!($variant)),+].len()] = [$(Self::$variant),+];

            /// The mutant's name on the command line.
            pub fn name(self) -> &'static str {
                match self {
                    $( Self::$variant => $text, )+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }

        #[doc = concat!("A ", $kind, " name that does not exist.")]
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $unknown(pub String);

        impl ::std::fmt::Display for $unknown {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                let names: ::std::vec::Vec<&str> = $name::ALL.iter().map(|m| m.name()).collect();
                write!(
                    f,
                    concat!("unknown ", $kind, " `{}`; expected one of: {}"),
                    self.0,
                    names.join(", ")
                )
            }
        }

        impl ::std::error::Error for $unknown {}

        impl ::std::str::FromStr for $name {
            type Err = $unknown;

            fn from_str(name: &str) -> ::std::result::Result<Self, Self::Err> {
                Self::ALL
                    .into_iter()
                    .find(|m| m.name() == name)
                    .ok_or_else(|| $unknown(name.to_owned()))
            }
        }
    };
}

pub(crate) use mutants;
