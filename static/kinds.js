//! The kinds of protection and the dead-letter causes, with their words, as the server names
//! them (`GET /api/protection-kinds`, made from the one table in src/retry/protection/mod.rs):
//! no page module lists a kind or a cause of its own.

const answer = await fetch('/api/protection-kinds').then((r) => {
  if (!r.ok) throw new Error(`the protection kinds: HTTP ${r.status}`);
  return r.json();
});

/** Every kind of protection a policy may list, `{kind, words}`, in the server's order. */
export const KINDS = answer.kinds;

/** Every cause a dead letter may carry, `{cause, words, kind?}` (`kind`: the protection whose
 *  refusal it is), in the server's order. */
export const CAUSES = answer.causes;

/** A cause's words, by its name. */
export const CAUSE_WORDS = Object.fromEntries(CAUSES.map((c) => [c.cause, c.words]));
