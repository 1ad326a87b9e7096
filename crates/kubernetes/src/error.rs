//! The client's error type: what went wrong talking to the API server. The backend turns these
//! into `SandboxError`s naming the layer that could not be established.

/// Why a request to the API server failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server could not be reached (DNS, connect, TLS handshake).
    #[error("cannot reach the API server: {0}")]
    Unreachable(String),
    /// The credentials could not be read or used (token, CA, client certificate, kubeconfig).
    #[error("kubernetes credentials: {0}")]
    Credentials(String),
    /// The server answered with an error status.
    #[error("the API server answered {status}: {message}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The `Status` object's message, or what was asked.
        message: String,
    },
    /// The server's answer was not what the protocol says.
    #[error("kubernetes protocol: {0}")]
    Protocol(String),
    /// The connection failed after it was established.
    #[error("connection to the API server: {0}")]
    Io(#[source] std::io::Error),
}

impl ClientError {
    pub(crate) fn io(error: std::io::Error) -> ClientError {
        ClientError::Io(error)
    }

    /// Whether the same request may succeed later (the server was unreachable, the connection
    /// dropped, a conflict, throttling, a server error).
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Unreachable(_) | ClientError::Io(_) => true,
            ClientError::Status { status, .. } => matches!(status, 409 | 429 | 500..=599),
            ClientError::Credentials(_) | ClientError::Protocol(_) => false,
        }
    }
}
