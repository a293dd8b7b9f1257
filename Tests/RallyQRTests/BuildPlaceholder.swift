// Temporary: keeps the target non-empty until the QR tests land; delete then.
