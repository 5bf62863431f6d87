//! What a provider session can do, as data.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How well a provider supports one capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Support {
    /// The CLI's protocol provides it directly.
    Native,
    /// The adapter provides it on top of other features (e.g. skills through a generated plugin).
    Emulated,
    /// Available but unstable in the CLI; may change between CLI versions.
    Experimental,
    /// Not available; asking for it fails with [`crate::Error::Unsupported`].
    Unsupported,
}

impl Support {
    /// True for [`Support::Native`], [`Support::Emulated`] and [`Support::Experimental`].
    pub fn is_available(self) -> bool {
        !matches!(self, Support::Unsupported)
    }
}

macro_rules! capabilities {
    ($($(#[$doc:meta])* $field:ident => $variant:ident),* $(,)?) => {
        /// Per-capability support of one provider session.
        ///
        /// Check these when writing provider-agnostic orchestration; options and calls that need
        /// an unsupported capability fail before anything is spawned or sent.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
        #[non_exhaustive]
        pub struct Capabilities {
            $($(#[$doc])* pub $field: Support,)*
        }

        /// The name of one capability, used in [`crate::Error::Unsupported`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        #[non_exhaustive]
        pub enum Capability {
            $($(#[$doc])* $variant,)*
        }

        impl Capabilities {
            /// Every capability unsupported; providers switch on what they have.
            pub const NONE: Capabilities = Capabilities { $($field: Support::Unsupported,)* };

            /// The support level of one capability.
            pub fn get(&self, capability: Capability) -> Support {
                match capability {
                    $(Capability::$variant => self.$field,)*
                }
            }

            /// Sets the support level of one capability.
            pub fn with(mut self, capability: Capability, support: Support) -> Self {
                match capability {
                    $(Capability::$variant => self.$field = support,)*
                }
                self
            }
        }

        impl Capability {
            /// Every capability, in declaration order.
            pub const ALL: &'static [Capability] = &[$(Capability::$variant,)*];

            /// The snake_case name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Capability::$variant => stringify!($field),)*
                }
            }
        }
    };
}

capabilities! {
    /// Incremental assistant text (`message_delta`).
    token_streaming => TokenStreaming,
    /// Reasoning/thinking output (`reasoning_delta`).
    reasoning => Reasoning,
    /// Questions to the user (`question` requests).
    questions => Questions,
    /// Command, file-change and permission approvals.
    approvals => Approvals,
    /// Approvals that cover the rest of the session (`Scope::Session`).
    session_approvals => SessionApprovals,
    /// MCP elicitation requests.
    mcp_elicitation => McpElicitation,
    /// Cancelling an active turn.
    cancel => Cancel,
    /// Adding input to an active turn.
    steer => Steer,
    /// Resuming a provider conversation in a new session.
    resume => Resume,
    /// Forking a provider conversation.
    fork => Fork,
    /// MCP servers configured per session.
    per_session_mcp => PerSessionMcp,
    /// Skills configured per session.
    skills => Skills,
    /// A system prompt / developer instructions.
    system_prompt => SystemPrompt,
    /// Choosing the model.
    model_selection => ModelSelection,
    /// Provider-native approval policies.
    approval_policy => ApprovalPolicy,
    /// Provider-native sandboxing.
    sandbox => Sandbox,
    /// Structured (multi-part) turn input.
    structured_input => StructuredInput,
    /// Images in turn input.
    images => Images,
    /// Token usage reports (`usage_updated`).
    usage => Usage,
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities::NONE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_and_with_agree_for_every_capability() {
        for &cap in Capability::ALL {
            let caps = Capabilities::NONE.with(cap, Support::Native);
            assert_eq!(caps.get(cap), Support::Native);
            let others = Capability::ALL.iter().filter(|&&c| c != cap);
            assert!(others.into_iter().all(|&c| caps.get(c) == Support::Unsupported));
        }
    }

    #[test]
    fn json_is_snake_case() {
        let caps = Capabilities::NONE.with(Capability::TokenStreaming, Support::Native);
        let json = serde_json::to_value(caps).unwrap();
        assert_eq!(json["token_streaming"], "native");
        assert_eq!(json["per_session_mcp"], "unsupported");
        assert_eq!(Capability::PerSessionMcp.to_string(), "per_session_mcp");
    }
}
