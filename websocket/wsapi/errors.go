package wsapi

// Refusal is a request refused before the upgrade: the HTTP status the client gets, and a
// message for a human.
type Refusal struct {
	Status  int
	Message string
}

func (r *Refusal) Error() string { return r.Message }

// ErrorCode is one of the WebSocket service's error codes (its WebSocketError): a producer's
// failed send is answered "send-error:<code>".
type ErrorCode int

const (
	FailedToCreateProducer      ErrorCode = 1
	FailedToSubscribe           ErrorCode = 2
	FailedToDeserializeFromJSON ErrorCode = 3
	FailedToSerializeToJSON     ErrorCode = 4
	AuthenticationError         ErrorCode = 5
	NotAuthorizedError          ErrorCode = 6
	PayloadEncodingError        ErrorCode = 7
	UnknownError                ErrorCode = 8
)

// Description is the error's text as the service words it.
func (c ErrorCode) Description() string {
	switch c {
	case FailedToCreateProducer:
		return "Failed to create producer"
	case FailedToSubscribe:
		return "Failed to subscribe"
	case FailedToDeserializeFromJSON:
		return "Failed to de-serialize from JSON"
	case FailedToSerializeToJSON:
		return "Failed to serialize to JSON"
	case AuthenticationError:
		return "Failed to authenticate client"
	case NotAuthorizedError:
		return "Client is not authorized"
	case PayloadEncodingError:
		return "Invalid payload encoding"
	}
	return "Unknown error"
}
