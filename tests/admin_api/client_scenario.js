// Drives Pressroom's Admin API with the reference platform's official client, as a site's tools do.
// Usage: node client_scenario.js scenario|check|lexical URL KEY [POST_IDS... | LEXICAL]; prints one JSON document.
const GhostAdminAPI = require('@tryghost/admin-api');
const token = require('@tryghost/admin-api/lib/token');
const axios = require('axios');

const [mode, url, key, ...ids] = process.argv.slice(2);
const api = new GhostAdminAPI({url, key, version: 'v5.0'});

// The client has no tiers resource: a request of our own, signed the way the client signs.
async function raw(method, path, data) {
    const response = await axios({method, url: `${url}/ghost/api/admin/${path}`, data,
        headers: {Authorization: `Ghost ${token(key, '/admin/')}`, 'Accept-Version': 'v5.0'}});
    return response.data;
}

async function failure(promise) {
    try {
        await promise;
    } catch (error) {
        return {type: error.name, message: error.message};
    }
    return null;
}

async function scenario() {
    const site = await api.site.read();
    const newsletter = await api.newsletters.add({name: 'Client Weekly', subscribe_on_signup: false});
    const tier = (await raw('post', 'tiers/', {tiers: [{name: 'Gold', type: 'paid'}]})).tiers[0];
    const subscribe = [{id: newsletter.id}];
    const vip1 = await api.members.add({email: 'vip1@client-example.com', name: 'Vip One',
        labels: ['VIP'], newsletters: subscribe});
    const vip2 = await api.members.add({email: 'vip2@client-example.com', labels: [{name: 'VIP'}],
        newsletters: subscribe, note: 'met at the fair'});
    const plain = await api.members.add({email: 'plain@client-example.com', newsletters: subscribe});
    const comped = await api.members.add({email: 'comped@client-example.com', comped: true,
        newsletters: subscribe});
    const vips = await api.members.browse({filter: 'label:vip', limit: 'all'});
    const searched = await api.members.browse({search: 'plain@'});

    const draft = await api.posts.add({title: 'For the VIPs',
        html: '<p>Hello VIPs</p><script>alert(1)</script><p onclick="x()">Thanks</p>'}, {source: 'html'});
    const collision = await failure(api.posts.edit({id: draft.id, updated_at: '2001-01-01T00:00:00.000Z',
        title: 'Too late'}));
    const published = await api.posts.edit({id: draft.id, updated_at: draft.updated_at, status: 'published'},
        {newsletter: newsletter.slug, email_segment: 'label:vip'});
    const inTen = new Date(Date.now() + 10000).toISOString();
    const scheduled = await api.posts.add({title: 'For everyone', html: '<p>Everyone reads this</p>',
        status: 'scheduled', published_at: inTen}, {source: 'html', newsletter: newsletter.slug});
    const edited = await api.posts.edit({id: scheduled.id, updated_at: scheduled.updated_at,
        title: 'For everyone, edited'});
    const doomed = await api.posts.add({title: 'Never mind', html: '<p>gone</p>'}, {source: 'html'});
    await api.posts.delete({id: doomed.id});
    const gone = await failure(api.posts.read({id: doomed.id}));
    const bySlug = await api.posts.read({slug: published.slug});
    const invalid = await failure(api.posts.edit({id: draft.id, status: 'sent'}));
    const renamed = await api.members.edit({id: plain.id, name: 'Plain Reader', labels: ['Regular']});
    const designed = await api.newsletters.edit({id: newsletter.id, title_alignment: 'left',
        background_color: '#FFEEDD', show_byline: false, footer_content: '<p>Bye<script>x()</script></p>'});
    const badDesign = await failure(api.newsletters.edit({id: newsletter.id, title_font_category: 'comic'}));
    return {site, newsletter, tier, members: [vip1, vip2, plain, comped], vips: vips.length,
        vipsMeta: vips.meta, searched: searched.map((m) => m.email), draft, collision, published, scheduled,
        edited, gone, bySlug: bySlug.id, invalid, renamed, designed, badDesign};
}

async function check() {
    const posts = [];
    for (const id of ids) {
        posts.push(await api.posts.read({id}));
    }
    return {posts, browsed: (await api.posts.browse({limit: 'all', filter: 'status:published'})).map((p) => p.id)};
}

// The editor's way: a post as a Lexical document (the one argument after KEY), read back with it.
async function lexical() {
    const [document] = ids;
    const added = await api.posts.add({title: 'Every card', lexical: document});
    const read = await api.posts.read({id: added.id, formats: 'html,lexical'});
    const unknown = await failure(api.posts.add({title: 'Unknown',
        lexical: JSON.stringify({root: {children: [{type: 'transistor', version: 1}]}})}));
    return {added, read, unknown};
}

// The reference's email options of an added member: none unless asked (send_email, email_type).
async function welcome() {
    const quiet = await api.members.add({email: 'quiet@client-example.com'});
    const refused = await api.members.add({email: 'quiet.too@client-example.com'}, {send_email: false});
    const asked = await api.members.add({email: 'asked@client-example.com'}, {send_email: true, email_type: 'signup'});
    const signin = await failure(api.members.add({email: 'signin@client-example.com'},
        {send_email: true, email_type: 'signin'}));
    return {quiet, refused, asked, signin};
}

const modes = {scenario, check, lexical, welcome};
modes[mode]().then((result) => {
    process.stdout.write(JSON.stringify(result));
}).catch((error) => {
    process.stderr.write(`${error.name}: ${error.message}\n${JSON.stringify(error)}\n`);
    process.exit(1);
});
