//! Answering a runtime event with an endpoint's result, for the worker's
//! event loop and the plugin actors' threads.

use monarch_core::Event;

/// What an endpoint answers: parts, or an error message.
pub type Reply = Result<Vec<Vec<u8>>, String>;

/// Answer `ev` with `r`, logging when that fails.
pub fn answer(ev: &mut Event, r: Reply) {
    let result = match &r {
        Ok(parts) => {
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            ev.reply(Ok(&refs))
        }
        Err(msg) => ev.reply(Err((msg, &[]))),
    };
    if let Err(e) = result {
        tracing::warn!(actor = %ev.actor, method = %ev.method, error = %e, "cannot reply");
    }
}
