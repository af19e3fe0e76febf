-- Docker engines on other machines (the engine on this one is the host `local`, never stored):
-- an address `tcp://HOST:PORT` and the folder holding ca.pem, cert.pem and key.pem.
CREATE TABLE hosts (
    name        TEXT PRIMARY KEY CHECK (name <> 'local'),
    url         TEXT NOT NULL,
    tls_dir     TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);
