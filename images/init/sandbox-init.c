/*
 * sandbox-init: the first process of a pre-started (pooled) sandbox. Security code: keep it this small.
 *
 * A pooled sandbox is created and started with every setting of its profile (user, capabilities,
 * seccomp, rlimits, mounts, no network: all set by the engine before this runs) and this program as its
 * command. It waits for ONE launch message on its stdin -- Docker: the engine's attach stream, opened by
 * the orchestrator before the container started; Kubernetes: a named pipe whose writer the orchestrator
 * exec'd in the pod's sidecar (nothing else runs in the pod before the launch) -- then applies it and execs
 * the command, which replaces it as PID 1 in a container no one has used. It never forks, handles no
 * signal, opens no file but /dev/null, and reads no byte past the message (what follows on stdin is the
 * command's own input).
 *
 * The message: the 4 bytes "SBX2", the payload's length (4 bytes, big-endian, at most MAX_PAYLOAD), then
 * the payload: NUL-terminated strings, nothing after the last one:
 *     report   "" or REPORT_LEN lowercase hex digits: a token fresh for this launch (see below)
 *     stdin    "stdin" (the command reads the rest of this stream) or "null" (it reads /dev/null)
 *     cwd      the working directory, absolute
 *     argc     decimal, 1..MAX_ITEMS, then that many arguments (the first names the program, found
 *              in the message's PATH like the engine's runtime would, never run through a shell)
 *     envc     decimal, 0..MAX_ITEMS, then that many "NAME=value", set over the environment the engine
 *              gave this process (the image's, HOSTNAME, HOME: the container was created with no
 *              variables of its own), so the command's is what a container created with them has
 *
 * Exit statuses when the command never ran: 125 a bad or missing message, or a working directory that
 * cannot be entered; 126 the program cannot be executed; 127 it was not found (as a shell says). The
 * reason goes to stderr as one line, "sandbox-init: <reason>", or, once a report token was read,
 * "sandbox-init[<token>:<status>]: <reason>": the orchestrator's proof that the command never ran (it can then
 * answer as a cold start that failed). The command can never forge it: the token exists only in the
 * message, which this process consumed, and in its memory, which the execve replaced.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAGIC "SBX2"
#define MAX_PAYLOAD (1024 * 1024)
#define MAX_ITEMS 4096
#define REPORT_LEN 32
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* the launch's report token, once read: it marks the line die() writes as this init's (see the top) */
static const char *report = "";

static void die(int status, const char *what, const char *detail) {
    const char *sep = detail ? ": " : "";
    if (report[0])
        dprintf(2, "sandbox-init[%s:%d]: %s%s%s\n", report, status, what, sep, detail ? detail : "");
    else
        dprintf(2, "sandbox-init: %s%s%s\n", what, sep, detail ? detail : "");
    _exit(status);
}

/* exactly n bytes of fd 0, or die: the message is all or nothing */
static void read_exactly(unsigned char *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(0, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            die(125, "the launch message ended early", r < 0 ? strerror(errno) : NULL);
        got += (size_t)r;
    }
}

struct cursor {
    char *at;
    char *end;
};

/* the next NUL-terminated string of the payload, or die */
static char *next_string(struct cursor *c) {
    char *s = c->at;
    if (s >= c->end)
        die(125, "malformed launch message", "a string missing");
    char *nul = memchr(s, '\0', (size_t)(c->end - s));
    if (nul == NULL)
        die(125, "malformed launch message", "a string without its end");
    c->at = nul + 1;
    return s;
}

static size_t next_count(struct cursor *c, size_t least) {
    char *text = next_string(c);
    char *rest = NULL;
    errno = 0;
    unsigned long n = strtoul(text, &rest, 10);
    if (errno != 0 || rest == text || *rest != '\0' || text[0] == '-' || text[0] == '+' || n < least ||
        n > MAX_ITEMS)
        die(125, "malformed launch message", "a bad count");
    return (size_t)n;
}

/* execve argv[0] as given when it holds a '/', else found in the message's PATH (the default one when it
 * has none), as the engine's runtime does: never through a shell (execvp would run a file that is not a
 * program with /bin/sh), and never in the working directory for an empty PATH entry (the workspace is the
 * workload's own). Returns the errno of the failure that says most (a file found but refused). */
static int exec_in_path(char **argv, char **env) {
    if (strchr(argv[0], '/') != NULL) {
        execve(argv[0], argv, env);
        return errno;
    }
    const char *path = DEFAULT_PATH;
    for (char **e = env; *e != NULL; e++)
        if (strncmp(*e, "PATH=", 5) == 0)
            path = *e + 5;
    size_t name = strlen(argv[0]);
    int failure = ENOENT;
    for (const char *dir = path;; dir++) {
        const char *end = strchrnul(dir, ':');
        size_t len = (size_t)(end - dir);
        char candidate[4096];
        /* dir, '/', name, NUL */
        if (len > 0 && len < sizeof candidate && name < sizeof candidate - len - 1) {
            memcpy(candidate, dir, len);
            candidate[len] = '/';
            memcpy(candidate + len + 1, argv[0], name + 1);
            execve(candidate, argv, env);
            if (errno != ENOENT && errno != ENOTDIR)
                failure = errno;
        }
        if (*end == '\0')
            return failure;
        dir = end;
    }
}

int main(void) {
    unsigned char header[8];
    read_exactly(header, sizeof header);
    if (memcmp(header, MAGIC, 4) != 0)
        die(125, "malformed launch message", "no magic");
    uint32_t length = ((uint32_t)header[4] << 24) | ((uint32_t)header[5] << 16) | ((uint32_t)header[6] << 8) |
                      (uint32_t)header[7];
    if (length == 0 || length > MAX_PAYLOAD)
        die(125, "malformed launch message", "a bad length");
    char *payload = malloc(length);
    if (payload == NULL)
        die(125, "out of memory", NULL);
    read_exactly((unsigned char *)payload, length);
    struct cursor c = {payload, payload + length};

    char *token = next_string(&c);
    size_t token_len = strlen(token);
    if (token_len != 0 && (token_len != REPORT_LEN || strspn(token, "0123456789abcdef") != REPORT_LEN))
        die(125, "malformed launch message", "a bad report token");
    report = token;
    char *mode = next_string(&c);
    int with_stdin = strcmp(mode, "stdin") == 0;
    if (!with_stdin && strcmp(mode, "null") != 0)
        die(125, "malformed launch message", "a bad stdin mode");
    char *cwd = next_string(&c);
    if (cwd[0] != '/')
        die(125, "malformed launch message", "a relative working directory");

    size_t argc = next_count(&c, 1);
    char **argv = calloc(argc + 1, sizeof *argv);
    if (argv == NULL)
        die(125, "out of memory", NULL);
    for (size_t i = 0; i < argc; i++)
        argv[i] = next_string(&c);
    if (argv[0][0] == '\0')
        die(125, "malformed launch message", "an empty program name");

    size_t envc = next_count(&c, 0);
    char **env = calloc(envc + 1, sizeof *env);
    if (env == NULL)
        die(125, "out of memory", NULL);
    for (size_t i = 0; i < envc; i++) {
        env[i] = next_string(&c);
        char *eq = strchr(env[i], '=');
        if (eq == NULL || eq == env[i])
            die(125, "malformed launch message", "an environment entry without a name");
    }
    if (c.at != c.end)
        die(125, "malformed launch message", "bytes after the last string");

    if (!with_stdin) {
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null < 0 || dup2(null, 0) < 0)
            die(125, "cannot open /dev/null", strerror(errno));
        close(null);
    }
    if (chdir(cwd) != 0)
        die(125, "cannot enter the working directory", strerror(errno));
    /* the message's variables over the engine's, as the engine merges a container's over its image's */
    for (size_t i = 0; i < envc; i++)
        if (putenv(env[i]) != 0)
            die(125, "cannot set the environment", strerror(errno));
    int failure = exec_in_path(argv, environ);
    die(failure == ENOENT || failure == ENOTDIR ? 127 : 126, argv[0], strerror(failure));
    return 125;
}
