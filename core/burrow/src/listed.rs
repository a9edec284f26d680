//! Fieldless enums whose `ALL` list and `as_str` are generated from the
//! one declaration, so the list cannot miss a variant (SDK tables, the
//! OpenAPI document and the store's queries are all checked against or
//! built from `ALL`).

/// Declares a fieldless enum with, for each variant, its stable string:
/// `Variant = "text",`. Generates `ALL` (every variant, in declaration
/// order) and `as_str`.
macro_rules! listed_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order (generated from the
            /// declaration, so it cannot miss one).
            pub const ALL: [$name; [$($text),+].len()] = [$($name::$variant),+];

            /// The stable string of this variant.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }
    };
}
