//! # shedlock-macros
//!
//! One-line task locks for [shedlock](https://docs.rs/shedlock), the habit of ShedLock's
//! `@SchedulerLock(name = "report", lockAtMostFor = "10m", lockAtLeastFor = "30s")`. Use them
//! through `shedlock` with its `macros` feature: `#[shedlock::lock(...)]` and
//! `shedlock::lock_spec!(...)`.
//!
//! Both take string literals: `name` (required), `at_most` and `at_least` (optional: a missing one
//! comes from the executor's defaults, see `LockingExecutor::builder`). Durations use shedlock's
//! syntax (`500ms`, `10s`, `5m`, `1h`, `PT15M`, ...) and are checked at compile time, as is
//! `at_least <= at_most`: a bad value is a compile error pointing at it.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{ToTokens, quote, quote_spanned};
use std::time::Duration;
use syn::{
    Expr, ExprLit, FnArg, ItemFn, Lit, LitStr, MetaNameValue, ReturnType, Token,
    parse::{Parse, ParseStream},
    parse_macro_input, parse_quote,
    punctuated::Punctuated,
    spanned::Spanned,
};

/// Runs an `async fn` under a lock, through a `shedlock::LockingExecutor`.
///
/// The macro adds the parameter `executor: &shedlock::LockingExecutor` first (after `self`) and
/// wraps the output in `shedlock::Result<shedlock::TaskResult<_>>`: the body runs only when the
/// lock is won (`TaskResult::Executed(output)`); when the lock is held elsewhere it does not run
/// (`TaskResult::NotExecuted`); a backend failure is the outer `Err`. Inside the body
/// `shedlock::assert_locked()` holds and `?`, `return` and `self` mean what they meant.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> shedlock::Result<()> {
/// use std::sync::Arc;
/// use shedlock::{LockingExecutor, TaskResult};
/// use shedlock_memory::{MemoryLockProvider, MemoryServer};
///
/// #[shedlock::lock(name = "report", at_most = "10m", at_least = "30s")]
/// async fn report(rows: &[u32]) -> Result<u32, std::num::TryFromIntError> {
///     let total: u64 = rows.iter().map(|r| u64::from(*r)).sum();
///     Ok(u32::try_from(total)?)
/// }
///
/// let executor = LockingExecutor::new(Arc::new(MemoryLockProvider::new(&MemoryServer::new())));
/// assert_eq!(report(&executor, &[1, 2]).await?, TaskResult::Executed(Ok(3)));
/// // Held for at least 30 s after the fast run: the next call is skipped.
/// assert_eq!(report(&executor, &[1, 2]).await?, TaskResult::NotExecuted);
/// # Ok(()) }
/// ```
///
/// Keys: `name` (required), `at_most`, `at_least` (string literals; missing durations come
/// from the executor's defaults). Attributes on closures are not stable Rust: for a closure use
/// [`lock_spec!`] with `LockingExecutor::execute`.
#[proc_macro_attribute]
pub fn lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let args = parse_macro_input!(args as Args);
    let func = parse_macro_input!(item as ItemFn);
    match expand_fn(args, func) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// A `shedlock::LockSpec` checked at compile time, for closures and schedulers.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use shedlock::{LockingExecutor, Schedule, Scheduler};
/// use shedlock_memory::{MemoryLockProvider, MemoryServer};
///
/// let executor = LockingExecutor::new(Arc::new(MemoryLockProvider::new(&MemoryServer::new())));
/// let spec = shedlock::lock_spec!(name = "report", at_most = "10m", at_least = "30s");
/// assert!(executor.execute(&spec, || async { /* work */ }).await?.was_executed());
///
/// let scheduler = Scheduler::new(executor);
/// scheduler.schedule(Schedule::cron("0 */5 * * * *")?, spec, || async { /* work */ })?;
/// scheduler.shutdown().await;
/// # Ok(()) }
/// ```
#[proc_macro]
pub fn lock_spec(input: TokenStream) -> TokenStream {
    let args = parse_macro_input!(input as Args);
    match args.validate() {
        Ok(lock) => lock.spec_expr().into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// The raw `key = "value"` list.
struct Args(Punctuated<MetaNameValue, Token![,]>);

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        Ok(Args(Punctuated::parse_terminated(input)?))
    }
}

/// A checked lock declaration.
struct LockArgs {
    name: LitStr,
    at_most: Option<Duration>,
    at_least: Option<Duration>,
}

const KEYS: &str = "expected `name`, `at_most` or `at_least`";

impl Args {
    fn validate(self) -> syn::Result<LockArgs> {
        let mut name: Option<LitStr> = None;
        let mut at_most: Option<(Duration, LitStr)> = None;
        let mut at_least: Option<(Duration, LitStr)> = None;
        for nv in self.0 {
            let key = nv.path.get_ident().map(ToString::to_string).unwrap_or_default();
            let lit = match &nv.value {
                Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => s.clone(),
                other => {
                    let example = if key == "name" { "\"report\"" } else { "\"10m\"" };
                    return Err(syn::Error::new(
                        other.span(),
                        format!("`{key}` takes a string literal, e.g. {key} = {example}"),
                    ));
                }
            };
            let duplicate = || syn::Error::new(nv.path.span(), format!("`{key}` is given twice"));
            match key.as_str() {
                "name" => {
                    if name.is_some() {
                        return Err(duplicate());
                    }
                    if lit.value().is_empty() {
                        return Err(syn::Error::new(lit.span(), "the lock name must not be empty"));
                    }
                    name = Some(lit);
                }
                "at_most" | "at_least" => {
                    let d = shedlock_duration::parse_duration(&lit.value())
                        .map_err(|e| syn::Error::new(lit.span(), format!("{key}: {e}")))?;
                    let slot = if key == "at_most" { &mut at_most } else { &mut at_least };
                    if slot.is_some() {
                        return Err(duplicate());
                    }
                    *slot = Some((d, lit));
                }
                _ => {
                    return Err(syn::Error::new(
                        nv.path.span(),
                        format!("unknown key `{}`: {KEYS}", nv.path.to_token_stream()),
                    ));
                }
            }
        }
        let Some(name) = name else {
            return Err(syn::Error::new(Span::call_site(), "missing `name = \"...\"`"));
        };
        if let Some((d, lit)) = &at_most
            && d.is_zero()
        {
            return Err(syn::Error::new(lit.span(), "at_most must be greater than zero"));
        }
        if let (Some((most, _)), Some((least, lit))) = (&at_most, &at_least)
            && least > most
        {
            return Err(syn::Error::new(
                lit.span(),
                format!("at_least ({}) must not exceed at_most ({})", fmt(*least), fmt(*most)),
            ));
        }
        Ok(LockArgs { name, at_most: at_most.map(|(d, _)| d), at_least: at_least.map(|(d, _)| d) })
    }
}

fn fmt(d: Duration) -> String {
    format!("{:?}", d)
}

fn duration_tokens(d: Duration) -> TokenStream2 {
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    quote!(::core::time::Duration::new(#secs, #nanos))
}

impl LockArgs {
    fn spec_expr(&self) -> TokenStream2 {
        let name = &self.name;
        let mut expr = quote!(::shedlock::LockSpec::new(#name));
        if let Some(d) = self.at_most {
            let d = duration_tokens(d);
            expr = quote!(#expr.lock_at_most_for(#d));
        }
        if let Some(d) = self.at_least {
            let d = duration_tokens(d);
            expr = quote!(#expr.lock_at_least_for(#d));
        }
        expr
    }
}

fn expand_fn(args: Args, mut func: ItemFn) -> syn::Result<TokenStream2> {
    let lock = args.validate()?;
    if func.sig.asyncness.is_none() {
        return Err(syn::Error::new(
            func.sig.fn_token.span(),
            "#[shedlock::lock] applies to `async fn`s; for closures use `shedlock::lock_spec!` with \
             `LockingExecutor::execute`",
        ));
    }
    let output: syn::Type = match &func.sig.output {
        ReturnType::Default => parse_quote!(()),
        ReturnType::Type(_, ty) => (**ty).clone(),
    };
    let spec = lock.spec_expr();
    let block = &func.block;
    let body = quote_spanned! {block.span()=>
        {
            let __shedlock_spec = #spec;
            executor
                .execute(&__shedlock_spec, move || async move {
                    #[allow(clippy::let_and_return, clippy::needless_return)]
                    let __shedlock_output: #output = #block;
                    __shedlock_output
                })
                .await
        }
    };
    for input in &func.sig.inputs {
        if let FnArg::Typed(pat) = input
            && pat.pat.to_token_stream().to_string() == "executor"
        {
            return Err(syn::Error::new(
                pat.pat.span(),
                "#[shedlock::lock] adds a parameter named `executor`; rename this one",
            ));
        }
    }
    let executor_arg: FnArg = parse_quote!(executor: &::shedlock::LockingExecutor);
    let at = usize::from(matches!(func.sig.inputs.first(), Some(FnArg::Receiver(_))));
    func.sig.inputs.insert(at, executor_arg);
    func.sig.output = parse_quote!(-> ::shedlock::Result<::shedlock::TaskResult<#output>>);
    *func.block = syn::parse2(body)?;
    Ok(quote!(#func))
}
