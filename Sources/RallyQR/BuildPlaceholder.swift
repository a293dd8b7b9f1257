// Temporary: keeps the target non-empty until the QR encoder lands; delete then.
