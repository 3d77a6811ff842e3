// The GitHub Actions runner's container hook: ACTIONS_RUNNER_CONTAINER_HOOKS=<this file>
// (`sandboxctl ci github hook-path` prints where it is).
//
// It runs on the runner's own node (its externals), needs no package, and only forwards: the runner's JSON on
// stdin and the job's context variables go to the sandbox controller (POST $SANDBOX_URL/v1/ci/github/hook,
// bearer $SANDBOX_TOKEN or the contents of $SANDBOX_TOKEN_FILE; $SANDBOX_CA_FILE for a private CA), which
// decides and runs the step. Its answer streams one JSON object a line: {stream, data} goes to the job log as
// it comes, {exit_code, response} ends it (the response is written to the runner's responseFile). The exit
// code is the step's. SIGINT/SIGTERM (the runner's timeout) drops the connection: the controller then cancels
// the step. The protocol itself (what each command means) lives in the controller: orchestrator/ci/github.
'use strict'
const fs = require('fs')
const http = require('http')
// https (with tls and crypto) is loaded only for an https:// controller: it costs node ~15 ms at each start

// the hook's own variables it forwards (orchestrator/ci/github/protocol.py HOOK_ENV: the same list)
const FORWARDED = [
  'GITHUB_REPOSITORY', 'GITHUB_WORKFLOW', 'GITHUB_JOB', 'GITHUB_ACTION', 'GITHUB_ACTION_REPOSITORY',
  'GITHUB_ACTION_REF', 'GITHUB_RUN_ID', 'GITHUB_RUN_ATTEMPT', 'GITHUB_REF', 'GITHUB_EVENT_NAME', 'GITHUB_ACTOR',
  'RUNNER_NAME', 'SANDBOX_WORKSPACE', 'SANDBOX_EXTERNALS', 'SANDBOX_PROFILE'
]

function fail (message) {
  process.stderr.write(`sandbox hook: ${message}\n`)
  process.exit(1)
}

function token () {
  if (process.env.SANDBOX_TOKEN_FILE) {
    try {
      return fs.readFileSync(process.env.SANDBOX_TOKEN_FILE, 'utf8').trim()
    } catch (err) {
      fail(`SANDBOX_TOKEN_FILE cannot be read: ${err.code || err.message}`)
    }
  }
  if (process.env.SANDBOX_TOKEN) return process.env.SANDBOX_TOKEN.trim()
  fail('no token: set SANDBOX_TOKEN or SANDBOX_TOKEN_FILE (a token of the sandbox controller)')
}

function readStdin () {
  return new Promise((resolve, reject) => {
    const chunks = []
    process.stdin.on('data', chunk => chunks.push(chunk))
    process.stdin.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')))
    process.stdin.on('error', reject)
  })
}

async function main () {
  if (!process.env.SANDBOX_URL) fail('SANDBOX_URL is not set (the sandbox controller, e.g. http://sandbox:8080)')
  let url
  try {
    url = new URL('/v1/ci/github/hook', process.env.SANDBOX_URL)
  } catch (err) {
    fail(`SANDBOX_URL is not a URL: ${err.message}`)
  }
  const bearer = token()
  let input
  try {
    input = JSON.parse(await readStdin())
  } catch (err) {
    fail(`the runner's input is not JSON: ${err.message}`)
  }
  const env = {}
  for (const name of FORWARDED) {
    if (process.env[name]) env[name] = process.env[name]
  }
  const body = Buffer.from(JSON.stringify({ input, env }))
  const options = {
    method: 'POST',
    headers: {
      Authorization: `Bearer ${bearer}`,
      'Content-Type': 'application/json',
      'Content-Length': body.length
    }
  }
  if (url.protocol === 'https:' && process.env.SANDBOX_CA_FILE) {
    options.ca = fs.readFileSync(process.env.SANDBOX_CA_FILE)
  }
  const client = url.protocol === 'https:' ? require('https') : http
  const request = client.request(url, options, response => onResponse(response, input))
  request.on('error', err => fail(`the controller at ${url.origin} cannot be reached: ${err.code || err.message}`))
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.on(signal, () => {
      request.destroy() // the controller cancels the step when its caller goes away
      process.stderr.write(`sandbox hook: ${signal}: the step is cancelled\n`)
      process.exit(signal === 'SIGINT' ? 130 : 143)
    })
  }
  request.end(body)
}

function onResponse (response, input) {
  response.setEncoding('utf8')
  let pending = ''
  let ended = false
  if (response.statusCode !== 200) {
    response.on('data', chunk => { pending += chunk })
    response.on('end', () => {
      let error
      try {
        error = JSON.parse(pending).error
      } catch (_) {
        error = { code: `HTTP ${response.statusCode}`, message: pending.slice(0, 500) }
      }
      fail(`${error.code}: ${error.message}`)
    })
    return
  }
  const line = text => {
    if (!text) return
    const event = JSON.parse(text)
    if (typeof event.stream === 'string') {
      (event.stream === 'stderr' ? process.stderr : process.stdout).write(event.data)
    } else if ('exit_code' in event) {
      ended = true
      if (event.response && input.responseFile) {
        fs.writeFileSync(input.responseFile, JSON.stringify(event.response))
      }
      const code = Number.isInteger(event.exit_code) ? event.exit_code : 1
      // the job log is flushed before the hook ends
      process.stdout.write('', () => process.stderr.write('', () => process.exit(code > 255 ? 1 : code)))
    } // anything else ({} keep-alive lines, {execution_id}) is not for the log
  }
  response.on('data', chunk => {
    pending += chunk
    let newline
    while ((newline = pending.indexOf('\n')) >= 0) {
      const text = pending.slice(0, newline)
      pending = pending.slice(newline + 1)
      line(text)
    }
  })
  response.on('end', () => {
    line(pending)
    if (!ended) fail('the controller ended the answer before the step ended')
  })
  response.on('error', err => fail(`the answer broke off: ${err.message}`))
}

main().catch(err => fail(err.message))
