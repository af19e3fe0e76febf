-- MCP servers a bot uses, each started inside the bot's computer when one of its runs starts.
-- `command` is a JSON array (the program and its arguments) for a server on stdio; `url` is the
-- address of a remote server (streamable HTTP), reached from inside the computer. Exactly one of
-- them is set.
CREATE TABLE bot_mcp_servers (
    bot_id     TEXT NOT NULL REFERENCES bots(id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    command    TEXT,
    url        TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (bot_id, name),
    CHECK ((command IS NULL) <> (url IS NULL))
);
