"""Secrets as commands print them, and what the redactor must make of each: (output, redacted, why).
Shared by the redaction tests (whole output, capped, streamed)."""

from __future__ import annotations

GH = b"ghp_" + b"A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # 36 after the prefix
JWT = (
    b"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
    b"SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
AWS_SECRET = b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

POSITIVES: list[tuple[bytes, bytes, str]] = [
    # private keys: whole block, any flavour; unterminated (cut output) runs to the end
    (
        b"key:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nQUFB\n"
        b"-----END OPENSSH PRIVATE KEY-----\ndone\n",
        b"key:\n[REDACTED:private-key]\ndone\n",
        "private-key",
    ),
    (
        b"-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
        b"[REDACTED:private-key]",
        "private-key",
    ),
    (
        b"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----",
        b"[REDACTED:private-key]",
        "private-key",
    ),
    (
        b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHDBO\n-----END ENCRYPTED PRIVATE KEY-----\n",
        b"[REDACTED:private-key]\n",
        "private-key",
    ),
    (b"-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg", b"[REDACTED:private-key]", "private-key"),
    (
        b'{"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIE\\n-----END PRIVATE KEY-----\\n"}',
        b'{"private_key": "[REDACTED:private-key]"}',  # the secret-assignment value, merged
        "private-key",
    ),
    # AWS
    (b"id=AKIAIOSFODNN7EXAMPLE\n", b"id=[REDACTED:aws-access-key-id]\n", "aws-access-key-id"),
    (b'"AccessKeyId": "ASIAY34FZKBOKMUTVV7A",', b'"AccessKeyId": "[REDACTED:aws-access-key-id]",', "aws-access-key-id"),
    (b"AROA1234567890ABCDEFG", b"AROA1234567890ABCDEFG", ""),  # 17 after the prefix: not a key id
    (
        b"aws_secret_access_key = " + AWS_SECRET + b"\n",
        b"aws_secret_access_key = [REDACTED:aws-secret-access-key]\n",
        "aws-secret-access-key",
    ),
    (
        b"export AWS_SECRET_ACCESS_KEY=" + AWS_SECRET,
        b"export AWS_SECRET_ACCESS_KEY=[REDACTED:aws-secret-access-key]",
        "aws-secret-access-key",
    ),
    (
        b'"SecretAccessKey": "' + AWS_SECRET + b'"',
        b'"SecretAccessKey": "[REDACTED:aws-secret-access-key]"',
        "aws-secret-access-key",
    ),
    # HTTP authorization
    (
        b"> Authorization: Bearer abc.def-123_xyz\r\n> Accept: */*\r\n",
        b"> Authorization: Bearer [REDACTED:authorization-header]\r\n> Accept: */*\r\n",
        "authorization-header",
    ),
    (
        b"curl -H 'authorization: Basic dXNlcjpwYXNzd29yZA==' https://x",
        b"curl -H 'authorization: Basic [REDACTED:authorization-header]' https://x",
        "authorization-header",
    ),
    (
        b'{"Authorization": "token 0123abcd"}',
        b'{"Authorization": "token [REDACTED:authorization-header]"}',
        "authorization-header",
    ),
    (
        b"Proxy-Authorization: Digest username=bob, response=6629fae4",
        b"Proxy-Authorization: Digest [REDACTED:authorization-header]",
        "authorization-header",
    ),
    (b"using Bearer 8f3a9c2e1b7d", b"using Bearer [REDACTED:bearer-token]", "bearer-token"),
    (
        b"bearer abcdefghijklmnopqrstuvwxyz.ABC",
        b"bearer [REDACTED:bearer-token]",
        "bearer-token",
    ),
    # vendor tokens
    (b"GH=" + GH + b"\n", b"GH=[REDACTED:github-token]\n", "github-token"),
    (b"gho_" + b"x" * 36, b"[REDACTED:github-token]", "github-token"),
    (b"ghs_" + b"Z9" * 18 + b" ", b"[REDACTED:github-token] ", "github-token"),
    (
        b"github_pat_11ABCDEFG0abcdefghijklmn_" + b"o" * 59,
        b"[REDACTED:github-token]",
        "github-token",
    ),
    (b"glpat-xYz123abcDEF456ghiJk", b"[REDACTED:gitlab-token]", "gitlab-token"),
    (b"SLACK=xoxb-123456789012-abcdefABCDEF", b"SLACK=[REDACTED:slack-token]", "slack-token"),
    (b"xoxp-1-2-3-abcdef0123", b"[REDACTED:slack-token]", "slack-token"),
    (b"sk_live_4eC39HqLyjWDarjtT1zdp7dc", b"[REDACTED:stripe-key]", "stripe-key"),
    (b"(rk_live_51HxyzABCDEFGHIJklmnop)", b"([REDACTED:stripe-key])", "stripe-key"),
    (b"OPENAI_API_KEY=sk-Abc123def456GHI789jkl012", b"OPENAI_API_KEY=[REDACTED:openai-style-key]", "openai-style-key"),
    (b"key: sk-proj-Ab12_Cd34-Ef56Gh78Ij90Kl12Mn34", b"key: [REDACTED:openai-style-key]", "openai-style-key"),
    (b"sk-ant-api03-AbCdEf0123456789xyzXYZ", b"[REDACTED:openai-style-key]", "openai-style-key"),
    (
        b"maps key AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI ok",
        b"maps key [REDACTED:google-api-key] ok",
        "google-api-key",
    ),
    (b"npm_" + b"aB3" * 12, b"[REDACTED:npm-token]", "npm-token"),
    (b"hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh", b"[REDACTED:huggingface-token]", "huggingface-token"),
    (b"pypi-AgEIcHlwaS5vcmc" + b"Q" * 60, b"[REDACTED:pypi-token]", "pypi-token"),
    (b"token=" + JWT + b"&x=1", b"token=[REDACTED:jwt]&x=1", "jwt"),
    (b"id_token " + JWT, b"id_token [REDACTED:jwt]", "jwt"),
    # key = value: the key stays, the value goes
    (b"DB_PASSWORD=hunter2\n", b"DB_PASSWORD=[REDACTED:secret-assignment]\n", "secret-assignment"),
    (b"password: 'correct horse'\n", b"password: '[REDACTED:secret-assignment]'\n", "secret-assignment"),
    (b'{"client_secret": "s3cr\\"et"}', b'{"client_secret": "[REDACTED:secret-assignment]"}', "secret-assignment"),
    (b"  passwd = letme1n", b"  passwd = [REDACTED:secret-assignment]", "secret-assignment"),
    (b"Passphrase := open5esame\n", b"Passphrase := [REDACTED:secret-assignment]\n", "secret-assignment"),
    (b"GITHUB_TOKEN: abc123\n", b"GITHUB_TOKEN: [REDACTED:secret-assignment]\n", "secret-assignment"),
    (b"x-api-key: 1234-5678", b"x-api-key: [REDACTED:secret-assignment]", "secret-assignment"),
    (b"SECRET_KEY='django-insecure'", b"SECRET_KEY='[REDACTED:secret-assignment]'", "secret-assignment"),
    (b"apikey=Zm9vYmFy;", b"apikey=[REDACTED:secret-assignment];", "secret-assignment"),
    (b"private_key => abc123", b"private_key => [REDACTED:secret-assignment]", "secret-assignment"),
    (b"?access_token=ya29.a0AfH6SM&next=/", b"?access_token=[REDACTED:secret-assignment]&next=/", "secret-assignment"),
    (b'password = "cut off', b'password = "[REDACTED:secret-assignment]', "secret-assignment"),
    (b"PASSWORD='letmein'\n", b"PASSWORD='[REDACTED:secret-assignment]'\n", "secret-assignment"),
    (b"token: xKqPwLmZnBvRtYuIoPaSdFgHj\n", b"token: [REDACTED:secret-assignment]\n", "secret-assignment"),
    # URL credentials: only the password
    (
        b"git clone https://user:p4ss@github.com/x.git",
        b"git clone https://user:[REDACTED:url-credentials]@github.com/x.git",
        "url-credentials",
    ),
    (
        b"DATABASE_URL=postgres://app:p@ss:w0rd@db:5432/app",
        b"DATABASE_URL=postgres://app:[REDACTED:url-credentials]@db:5432/app",
        "url-credentials",
    ),
    (b"redis://:hunter2@cache:6379/0", b"redis://:[REDACTED:url-credentials]@cache:6379/0", "url-credentials"),
]
