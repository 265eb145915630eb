// The web UI of `flowmem serve`, driven in Debian's Chromium by Playwright
// (playwright-core from npm, scripts/setup/50-playwright.sh). Started by
// crates/cli/tests/it/ui.rs with one JSON argument:
//
//   {"base", "write_token", "read_token", "find", "xss", "run_key", "spare_id", "shots"}
//
// Each test below runs in its own browser context. A failing test saves a screenshot
// to `shots/<test>.png`. The script prints one JSON document:
// {"tests": [{"name", "ok", "error", "screenshot", ...facts}]}.
import { pathToFileURL } from "node:url";
import path from "node:path";

const program = JSON.parse(process.argv[2]);
const { chromium } = await import(pathToFileURL(path.join(process.env.PLAYWRIGHT_CORE, "index.mjs")).href);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const results = [];

function check(condition, message) {
  if (!condition) throw new Error(message);
}

async function test(name, body) {
  const context = await browser.newContext({ viewport: { width: 1366, height: 900 } });
  const page = await context.newPage();
  // A script the page runs that we did not send would set this.
  await page.addInitScript(() => { window.__xss = 0; });
  const facts = {};
  try {
    await body(page, facts);
    results.push({ name, ok: true, ...facts });
  } catch (err) {
    const screenshot = path.join(program.shots, `${name}.png`);
    await page.screenshot({ path: screenshot, fullPage: true }).catch(() => {});
    results.push({ name, ok: false, error: String(err && err.stack || err), screenshot, url: page.url(), ...facts });
  } finally {
    await context.close();
  }
}

async function signIn(page, token, next = "/") {
  await page.goto(`${program.base}${next}`);
  check(new URL(page.url()).pathname === "/signin", `an unsigned visit goes to /signin, not ${page.url()}`);
  await page.fill("#token", token);
  await Promise.all([page.waitForURL((url) => url.pathname !== "/signin"), page.click("#signin button")]);
}

// Sign in, search as you type, open the workflow the gateway learned, follow its
// provenance to the recorded conversation, then edit its description to markup (which
// must render as text) and retire it.
await test("sign_in_search_open_and_retire", async (page, facts) => {
  // A wrong token is refused on the page.
  await page.goto(`${program.base}/signin`);
  await page.fill("#token", "fmt_not-a-token");
  await page.click("#signin button");
  check((await page.textContent("#signin-error")).includes("not a token"), "a wrong token is refused");

  await signIn(page, program.write_token);
  check((await page.textContent("#who")).includes("write"), "signed in with write access");
  const cookies = await page.context().cookies();
  const session = cookies.find((c) => c.name === "flowmem_session");
  check(session && session.httpOnly && session.sameSite === "Strict", `the session cookie: ${JSON.stringify(session)}`);
  check(!cookies.some((c) => c.value.includes(program.write_token)), "the token is not in a cookie");
  facts.total_before = await page.textContent("#total");

  // Search as you type: no submit, the results follow the words.
  await page.type("#q", program.find, { delay: 30 });
  await page.waitForFunction(() => document.querySelectorAll("#workflows tr").length === 2, null, { timeout: 10000 });
  check(new URL(page.url()).searchParams.get("q") === program.find, "the URL follows the search");
  const link = page.locator("#workflows a").first();
  facts.description = await link.textContent();
  await Promise.all([page.waitForURL(/\/workflows\//), link.click()]);
  facts.workflow_id = decodeURIComponent(new URL(page.url()).pathname.split("/").pop());
  check((await page.locator("#steps tr").count()) >= 2, "the steps are shown");
  check((await page.locator("svg#workflow-graph").count()) === 1, "the graph is drawn");

  // Provenance: the gateway conversation it was learned from.
  const origin = page.locator("#provenance a").first();
  facts.conversation_id = await origin.textContent();
  await Promise.all([page.waitForURL(/\/conversations\//), origin.click()]);
  check((await page.textContent("#state")) === "done", "the conversation was learned from");
  const calls = await page.locator("#messages .call b").allTextContents();
  check(calls.join(",") === "get_order_details,cancel_pending_order", `its tool calls: ${calls}`);
  // The tool result holds HTML: it is shown as text, and nothing of it ran or rendered.
  const results = await page.locator("#messages .msg.tool pre").allTextContents();
  check(results.some((text) => text.includes(program.xss)), `the tool result's markup is text: ${results}`);
  check((await page.locator("#messages img, #messages b.injected").count()) === 0, "no element came from a tool result");
  check((await page.evaluate(() => window.__xss)) === 0, "no script of a tool result ran");
  check((await page.textContent("#verdict")).includes("Success"), "the evaluator's verdict is shown");
  await page.goBack();

  // Markup in a description is text.
  await page.fill("#edit-form textarea", program.xss);
  await Promise.all([page.waitForURL(/done=edited/), page.click("#edit-form button")]);
  check((await page.textContent("#description")) === program.xss, "the description renders as text");
  check((await page.locator("#description *").count()) === 0, "the description made no elements");
  check((await page.evaluate(() => window.__xss)) === 0, "no script of the description ran");
  const scripts = await page.locator("script").evaluateAll((all) => all.map((s) => s.getAttribute("src")));
  check(scripts.length === 1 && scripts[0] === "/ui/app.js", `only our script is on the page: ${scripts}`);

  // Retire it.
  await page.fill("#retire-form input[name=reason]", "superseded in the UI test");
  await Promise.all([page.waitForURL(/done=retired/), page.click("#retire-form button")]);
  check((await page.textContent("#retired")).includes("superseded in the UI test"), "retired, with the reason");
  await page.goto(`${program.base}/?q=${encodeURIComponent(program.find)}`);
  check((await page.locator("#workflows").count()) === 0, "a retired workflow leaves the memory listing");
});

// A scout run: the tree's nodes open their candidate's graph and plan.
await test("open_a_scout_run_and_click_a_tree_node", async (page, facts) => {
  await signIn(page, program.read_token, "/runs");
  const run = page.locator(`#runs a[href="/runs/${encodeURIComponent(program.run_key)}"]`);
  await Promise.all([page.waitForURL(/\/runs\/.+/), run.click()]);
  check((await page.locator("svg#search-tree").count()) === 1, "the search tree is drawn");
  check((await page.locator("svg#validation-curve, svg[id*=curve]").count()) >= 1, "the validation curve is drawn");
  const nodes = await page.locator("svg#search-tree a.tree-link").count();
  facts.tree_nodes = nodes;
  check(nodes >= 2, `the tree has a root and a child: ${nodes}`);
  await Promise.all([
    page.waitForURL(/node=1/),
    page.locator('svg#search-tree a.tree-link[data-node="1"]').click(),
  ]);
  check((await page.getAttribute("#candidate-detail", "data-node")) === "1", "candidate 1 is open");
  const graph = page.locator("#candidate-detail svg#workflow-graph");
  check(await graph.isVisible(), "its graph is drawn");
  facts.graph_nodes = await graph.locator("g.graph-node").count();
  check(facts.graph_nodes >= 2, "its graph has nodes");
  facts.edits = await page.locator("#edits li").allTextContents();
  check(facts.edits.length >= 1, "its plan's edits are listed");
  facts.diff = await page.locator("#diff li").allTextContents();
  check(facts.diff.some((line) => line.includes("nodes changed: synthesize")), `its diff against the parent: ${facts.diff}`);
  const marked = await graph.locator("g.graph-node.changed text").first().textContent();
  check(marked === "synthesize", `the changed node is marked in the graph: ${marked}`);
  check((await page.locator("#test tr").count()) >= 2, "the test table is shown");
});

// A read token sees no edit controls, and a forged POST is refused.
await test("a_read_token_cannot_change_anything", async (page, facts) => {
  await signIn(page, program.read_token, `/workflows/${encodeURIComponent(program.spare_id)}`);
  check((await page.textContent("#who")).includes("read"), "signed in with read access");
  check((await page.locator("#curate, form[action*='/retire'], form[action*='/edit']").count()) === 0, "no edit controls");
  // Forged: the session's own CSRF token (from the sign-out form) and the cookie.
  const csrf = await page.getAttribute("form[action='/signout'] input[name=csrf]", "value");
  const forged = await page.request.post(`${program.base}/workflows/${encodeURIComponent(program.spare_id)}/retire`, {
    form: { csrf, reason: "forged" },
  });
  facts.forged_status = forged.status();
  check(forged.status() === 403, `a forged POST with a read session: ${forged.status()}`);
  const noCsrf = await page.request.post(`${program.base}/workflows/${encodeURIComponent(program.spare_id)}/delete`, {
    form: { reason: "forged" },
  });
  facts.no_csrf_status = noCsrf.status();
  check(noCsrf.status() === 403, `a POST without the CSRF token: ${noCsrf.status()}`);
  await page.reload();
  check((await page.locator("#retired").count()) === 0, "the workflow is not retired");
});

await browser.close();
console.log(JSON.stringify({ tests: results }));
process.exit(results.every((r) => r.ok) ? 0 : 1);
