//! `GET /api/protection-kinds`: the protections a policy may list and the causes a dead letter
//! may carry, with their names and words, from the one table that names each kind
//! (`retry::protection`) and from `dlq::Cause`. The page takes them from here, so no page module
//! lists a kind of its own.

use axum::Json;
use serde::Serialize;

use crate::dlq::Cause;
use crate::retry::protection::ProtectionKind;

/// One kind of protection: the `kind` a policy lists it by, and its words.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KindView {
    pub kind: &'static str,
    pub words: &'static str,
}

/// One dead-letter cause: its name (as the filter and the counts have it), its words, and the
/// kind of the protection whose refusal it is, when one's.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CauseView {
    pub cause: &'static str,
    pub words: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
}

/// Every kind of protection and every dead-letter cause, in the server's order.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Kinds {
    pub kinds: Vec<KindView>,
    pub causes: Vec<CauseView>,
}

impl Kinds {
    pub fn all() -> Kinds {
        let kinds =
            ProtectionKind::ALL.iter().map(|kind| KindView { kind: kind.name(), words: kind.words() });
        let causes = Cause::all().map(|cause| CauseView {
            cause: cause.as_str(),
            words: cause.words(),
            kind: cause.kind().map(ProtectionKind::name),
        });
        Kinds { kinds: kinds.collect(), causes: causes.collect() }
    }
}

/// The kinds of protection a policy's `protections` may list (`kind`), and the causes a dead
/// letter may carry (`cause`, a protection's refusal filed under its kind), each with its words.
#[utoipa::path(
    get,
    path = "/api/protection-kinds",
    tag = "policies",
    responses((status = 200, body = Kinds))
)]
pub async fn protection_kinds() -> Json<Kinds> {
    Json(Kinds::all())
}
