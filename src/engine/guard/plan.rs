//! The plan layer: DuckDB binds the statement (views and macros expanded)
//! and the guard reads what the bound plan calls, scans and changes.

use super::describe::DescribeError;
use super::*;

/// The plan layer: DuckDB binds the statement (views and macros expanded)
/// and the guard checks what it would scan and call, and which databases it
/// would read and change. A bind error is the client's.
pub(super) fn check_plan(
    raw: &RawConnection,
    sql: &str,
    rules: &Rules,
) -> Result<describe::PlanNames, Refusal> {
    let plan = describe::plan_names(raw, sql).map_err(|e| match e {
        DescribeError::Nul => unparsable("the SQL text contains a NUL byte"),
        DescribeError::TooDeep(depth) => too_deep(depth),
        other => {
            tracing::error!(error.cause = ?other, "the guard's plan shim answered unreadably");
            forbid("SELECT", "the guard could not read its plan")
        }
    })?;
    if let Some(message) = plan.error {
        let class = plan.error_type.unwrap_or_else(|| "Binder".into());
        return Err(Refusal::Bind {
            message: format!("{class} Error: {message}"),
            at: plan.position.and_then(|p| place(sql, p)),
        });
    }
    if plan.unreadable {
        return Err(forbid("SELECT", "the guard could not read its whole plan"));
    }
    tree::check_plan_names(&plan.functions, &plan.tables).map_err(|f| forbid(f.what, f.reason))?;
    check_databases(&plan, rules)?;
    Ok(plan)
}

/// Every database the plan changes is one clients may change, and none it
/// reads is a lake's metadata. By DuckDB's own account of the statement, so
/// whatever form a write takes (an INSERT's target, a DROP, an EXPLAIN
/// ANALYZE of either, a sequence's `nextval`), its database is judged.
fn check_databases(plan: &describe::PlanNames, rules: &Rules) -> Result<(), Refusal> {
    let hidden = |name: &str| {
        name.to_ascii_lowercase()
            .starts_with(crate::engine::catalogs::HIDDEN_PREFIX)
    };
    if let Some(name) = plan.read.iter().find(|d| hidden(d)) {
        return Err(forbid(
            format!("database {name}"),
            "a lake's metadata is the gateway's; read a lake's tables by their names",
        ));
    }
    for name in &plan.modified {
        let writable = rules.policy == Policy::ReadWrite
            && rules.writable.iter().any(|w| w.eq_ignore_ascii_case(name));
        if !writable {
            let reason = match rules.policy {
                Policy::ReadOnly => READ_ONLY.to_string(),
                Policy::ReadWrite if hidden(name) => {
                    "a lake's metadata is the gateway's; change a lake through its own name".into()
                }
                Policy::ReadWrite => "clients may change the gateway's database and the catalogs \
                                      declared writable, nothing else"
                    .into(),
            };
            return Err(forbid(format!("database {name}"), reason));
        }
    }
    Ok(())
}
