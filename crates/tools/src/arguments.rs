//! Tool arguments into typed structs. The runtime validates against the JSON Schema first; this
//! is the second line, so a malformed call is a tool error the model can fix, never a crash.

use serde::de::DeserializeOwned;
use warden_runtime::ToolOutput;

pub(crate) fn parse<T: DeserializeOwned>(arguments: serde_json::Value) -> Result<T, ToolOutput> {
    serde_json::from_value(arguments)
        .map_err(|err| ToolOutput::Error(format!("invalid arguments: {err}")))
}
