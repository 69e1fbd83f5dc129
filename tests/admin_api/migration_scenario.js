// A site moving to Pressroom, driven with the reference platform's official client as a migration
// script drives it: labels by name, tiers with prices, comped members with tiers, members edited as
// read, the usual "find a member" step, and posts published from a draft.
// Usage: node migration_scenario.js MODE URL KEY [ARGS...]; prints one JSON document.
const GhostAdminAPI = require('@tryghost/admin-api');
const token = require('@tryghost/admin-api/lib/token');
const axios = require('axios');

const [mode, url, key, ...args] = process.argv.slice(2);
const api = new GhostAdminAPI({url, key, version: 'v5.0'});

// Labels and tiers have no resource in the client: requests of our own, signed the way it signs.
async function raw(method, path, data) {
    const response = await axios({method, url: `${url}/ghost/api/admin/${path}`, data,
        headers: {Authorization: `Ghost ${token(key, '/admin/')}`, 'Accept-Version': 'v5.0'}});
    return response.data;
}

// A refusal: the client's error, or a raw request's status and the reference's error envelope.
async function failure(promise) {
    try {
        await promise;
    } catch (error) {
        if (error.response) {
            const [first] = error.response.data.errors;
            return {status: error.response.status, type: first.type, message: first.message,
                property: first.property};
        }
        return {type: error.name, message: error.message};
    }
    return null;
}

async function labels() {
    const owl = await api.members.add({email: 'owl@migrating.example', labels: ['VIP', {name: 'Night Owls'}]});
    const press = (await raw('post', 'labels/', {labels: [{name: 'Press Corps'}]})).labels[0];
    const reporter = await api.members.add({email: 'reporter@migrating.example', labels: ['Press Corps', 'vip']});
    const taken = await failure(raw('post', 'labels/', {labels: [{name: 'press corps'}]}));
    const edited = await api.members.edit({id: reporter.id, labels: [...reporter.labels, 'Early Birds']});
    const all = (await raw('get', 'labels/?limit=all&order=slug%20asc')).labels;
    return {owl, press, reporter, taken, edited, all};
}

async function tiers() {
    const priced = await failure(raw('post', 'tiers/', {tiers: [{name: 'Gold', monthly_price: 500,
        yearly_price: 5000, currency: 'usd'}]}));
    const currency = await failure(raw('post', 'tiers/', {tiers: [{name: 'Gold', currency: 'usd'}]}));
    const before = (await raw('get', 'tiers/')).meta.pagination.total;
    // As a client sends a tier it read elsewhere: its fixed values and empty prices go through.
    const gold = (await raw('post', 'tiers/', {tiers: [{name: 'Gold', type: 'paid', active: true,
        visibility: 'public', monthly_price: null, yearly_price: null, currency: null, benefits: []}]})).tiers[0];
    return {priced, currency, before, gold};
}

async function comped() {
    const gold = (await raw('post', 'tiers/', {tiers: [{name: 'Gold', type: 'paid'}]})).tiers[0];
    const compedTier = await api.members.add({email: 'comped-tier@migrating.example', comped: true,
        tiers: [{id: gold.id}]});
    const tierOnly = await api.members.add({email: 'tier-only@migrating.example', tiers: [{id: gold.id}]});
    const compedOnly = await api.members.add({email: 'comped-only@migrating.example', comped: true});
    const plain = await api.members.add({email: 'plain@migrating.example'});
    return {gold, members: [compedTier, tierOnly, compedOnly, plain]};
}

async function edit() {
    // Before the site has a paid tier: comped with none, then not comped any more, as read.
    const gift = await api.members.add({email: 'gift@migrating.example', comped: true});
    const uncomped = await api.members.edit({...(await api.members.read({id: gift.id})), comped: false});
    const gold = (await raw('post', 'tiers/', {tiers: [{name: 'Gold', type: 'paid'}]})).tiers[0];
    const newsletter = await api.newsletters.add({name: 'Weekly'});
    const added = await api.members.add({email: 'edited@migrating.example', name: 'Before', labels: ['VIP'],
        newsletters: [{id: newsletter.id}], comped: true, tiers: [{id: gold.id}], note: 'kept'});
    // The client's usual read-modify-write: every field as read, one changed.
    const read = await api.members.read({id: added.id});
    const edited = await api.members.edit({...read, name: 'After'});
    const again = await api.members.edit({...(await api.members.read({id: added.id})), note: 'changed'});
    const unknown = await failure(api.members.edit({...read, shoe_size: 42}));
    return {read, edited, again, unknown, gift, uncomped};
}

async function find() {
    const newsletter = await api.newsletters.add({name: 'Weekly'});
    const ada = await api.members.add({email: 'ada@find.example', newsletters: [{id: newsletter.id}]});
    const bob = await api.members.add({email: 'bob@find.example', newsletters: []});
    const emails = (members) => members.map((m) => m.email);
    return {
        ada: ada.id,
        byEmail: emails(await api.members.browse({filter: "email:'ada@find.example'"})),
        anyCase: emails(await api.members.browse({filter: "email:'Ada@Find.Example'"})),
        either: emails(await api.members.browse({filter: "email:['ada@find.example','bob@find.example']",
            order: 'email asc'})),
        unsubscribed: emails(await api.members.browse({filter: 'subscribed:false'})),
        subscribed: emails(await api.members.browse({filter: 'subscribed:true'})),
        bobSubscribed: emails(await api.members.browse({filter: "subscribed:true+email:'bob@find.example'"})),
        withStatus: emails(await api.members.browse({filter: "status:free+email:'bob@find.example'"})),
        nobody: emails(await api.members.browse({filter: "email:'nobody@find.example'"})),
        badSubscribed: await failure(api.members.browse({filter: 'subscribed:maybe'})),
        unknown: await failure(raw('get', 'nonsense/')),
        unknownPost: await failure(raw('post', 'nonsense/things/', {})),
        notHere: await failure(raw('get', 'themes/')),
    };
}

async function published() {
    const draft = await api.posts.add({title: 'Drafted first', html: '<p>Draft</p>'}, {source: 'html'});
    const fromDraft = await api.posts.edit({id: draft.id, updated_at: draft.updated_at, status: 'published'});
    const atOnce = await api.posts.add({title: 'Published at once', html: '<p>Now</p>', status: 'published'},
        {source: 'html'});
    return {fromDraft, atOnce};
}

const modes = {labels, tiers, comped, edit, find, published};
modes[mode]().then((result) => {
    process.stdout.write(JSON.stringify(result));
}).catch((error) => {
    process.stderr.write(`${error.name}: ${error.message}\n${JSON.stringify(error.response?.data ?? error)}\n`);
    process.exit(1);
});
