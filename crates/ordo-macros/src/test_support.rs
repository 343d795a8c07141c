//! Helpers for the expansion unit tests.

use proc_macro2::{TokenStream, TokenTree};

/// The messages of every `compile_error!` in `tokens`, in order.
pub(crate) fn compile_errors(tokens: &TokenStream) -> Vec<String> {
    let mut out = Vec::new();
    collect(tokens.clone(), &mut out);
    out
}

fn collect(tokens: TokenStream, out: &mut Vec<String>) {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, tree) in trees.iter().enumerate() {
        match tree {
            TokenTree::Ident(ident) if ident == "compile_error" => {
                if let Some(TokenTree::Group(group)) = trees.get(i + 2)
                    && let Ok(lit) = syn::parse2::<syn::LitStr>(group.stream())
                {
                    out.push(lit.value());
                }
            }
            TokenTree::Group(group) => collect(group.stream(), out),
            _ => {}
        }
    }
}
