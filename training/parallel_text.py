"""Parallel German / Spanish / English sentences from a small grammar (the corpus's own
parallel text, for the translation windows and training utterances; docs/corpus.md).

No offline bilingual corpus ships with a Python package, so the corpus writes its own: a
fixed lexicon (nouns with their German gender and plural and their Spanish gender and
plural, adjectives, verbs, numbers, places, days) and sentence templates that agree in
each language (German article case and adjective endings, Spanish article and adjective
agreement, word order). Every draw returns the same sentence in the three languages, so
the English side is an exact reference translation of the German or Spanish audio. Texts
are normalised as every corpus text is (lower case, letters of the three languages).

    python training/parallel_text.py 10      # print ten draws
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from as2d_cli.corpus.questions import NUMBER_NAMES

LANGS = ("en", "de", "es")


@dataclass(frozen=True)
class Noun:
    en: str
    en_pl: str
    de: str
    de_pl: str
    de_g: str  # m f n
    es: str
    es_pl: str
    es_g: str  # m f
    thing: bool = True  # an inanimate object (Spanish objects of people take "a")


def _n(spec: str, thing: bool = True) -> Noun:
    en, en_pl, de, de_pl, de_g, es, es_pl, es_g = spec.split()
    return Noun(en, en_pl, de, de_pl, de_g, es, es_pl, es_g, thing)


THINGS = [
    _n(s)
    for s in (
        "house houses haus häuser n casa casas f",
        "car cars auto autos n coche coches m",
        "book books buch bücher n libro libros m",
        "table tables tisch tische m mesa mesas f",
        "chair chairs stuhl stühle m silla sillas f",
        "window windows fenster fenster n ventana ventanas f",
        "door doors tür türen f puerta puertas f",
        "apple apples apfel äpfel m manzana manzanas f",
        "letter letters brief briefe m carta cartas f",
        "tree trees baum bäume m árbol árboles m",
        "flower flowers blume blumen f flor flores f",
        "train trains zug züge m tren trenes m",
        "ship ships schiff schiffe n barco barcos m",
        "bed beds bett betten n cama camas f",
        "cup cups tasse tassen f taza tazas f",
        "key keys schlüssel schlüssel m llave llaves f",
        "bag bags tasche taschen f bolsa bolsas f",
        "shoe shoes schuh schuhe m zapato zapatos m",
        "song songs lied lieder n canción canciones f",
        "picture pictures bild bilder n cuadro cuadros m",
        "box boxes kiste kisten f caja cajas f",
        "clock clocks uhr uhren f reloj relojes m",
        "lamp lamps lampe lampen f lámpara lámparas f",
        "bottle bottles flasche flaschen f botella botellas f",
        "glass glasses glas gläser n vaso vasos m",
        "egg eggs ei eier n huevo huevos m",
        "hat hats hut hüte m sombrero sombreros m",
        "shirt shirts hemd hemden n camisa camisas f",
        "pen pens stift stifte m bolígrafo bolígrafos m",
        "plate plates teller teller m plato platos m",
        "ball balls ball bälle m pelota pelotas f",
        "ticket tickets fahrkarte fahrkarten f billete billetes m",
        "map maps karte karten f mapa mapas m",
        "bicycle bicycles fahrrad fahrräder n bicicleta bicicletas f",
        "cake cakes kuchen kuchen m pastel pasteles m",
        "newspaper newspapers zeitung zeitungen f periódico periódicos m",
        "computer computers computer computer m ordenador ordenadores m",
        "phone phones telefon telefone n teléfono teléfonos m",
        "jacket jackets jacke jacken f chaqueta chaquetas f",
        "spoon spoons löffel löffel m cuchara cucharas f",
    )
]
PEOPLE = [
    _n(s, thing=False)
    for s in (
        "man men mann männer m hombre hombres m",
        "woman women frau frauen f mujer mujeres f",
        "child children kind kinder n niño niños m",
        "friend friends freund freunde m amigo amigos m",
        "teacher teachers lehrer lehrer m profesor profesores m",
        "doctor doctors arzt ärzte m médico médicos m",
        "student students student studenten m estudiante estudiantes m",
        "girl girls mädchen mädchen n chica chicas f",
        "boy boys junge jungen m chico chicos m",
        "neighbour neighbours nachbar nachbarn m vecino vecinos m",
        "cook cooks koch köche m cocinero cocineros m",
        "driver drivers fahrer fahrer m conductor conductores m",
    )
]
ANIMALS = [
    _n(s, thing=False)
    for s in (
        "dog dogs hund hunde m perro perros m",
        "cat cats katze katzen f gato gatos m",
        "bird birds vogel vögel m pájaro pájaros m",
        "horse horses pferd pferde n caballo caballos m",
        "fish fish fisch fische m pez peces m",
        "cow cows kuh kühe f vaca vacas f",
        "mouse mice maus mäuse f ratón ratones m",
    )
]
PLACES = [
    _n(s)
    for s in (
        "kitchen kitchens küche küchen f cocina cocinas f",
        "garden gardens garten gärten m jardín jardines m",
        "room rooms zimmer zimmer n habitación habitaciones f",
        "school schools schule schulen f escuela escuelas f",
        "park parks park parks m parque parques m",
        "shop shops laden läden m tienda tiendas f",
        "street streets straße straßen f calle calles f",
        "city cities stadt städte f ciudad ciudades f",
        "station stations bahnhof bahnhöfe m estación estaciones f",
        "office offices büro büros n oficina oficinas f",
        "library libraries bibliothek bibliotheken f biblioteca bibliotecas f",
        "car cars auto autos n coche coches m",
        "box boxes kiste kisten f caja cajas f",
        "village villages dorf dörfer n pueblo pueblos m",
    )
]


@dataclass(frozen=True)
class Adj:
    en: str
    de: str
    es_m: str
    es_f: str
    es_pl_m: str
    es_pl_f: str


def _a(spec: str) -> Adj:
    en, de, es_m, es_f, *pl = spec.split()
    if pl:
        return Adj(en, de, es_m, es_f, pl[0], pl[1])
    return Adj(en, de, es_m, es_f, _es_plural(es_m), _es_plural(es_f))


def _es_plural(w: str) -> str:
    if w[-1] in "aeiouáéíóú":
        return w + "s"
    return w + "es"


ADJECTIVES = [
    _a(s)
    for s in (
        "big groß grande grande",
        "small klein pequeño pequeña",
        "old alt viejo vieja",
        "new neu nuevo nueva",
        "red rot rojo roja",
        "green grün verde verde",
        "blue blau azul azul azules azules",
        "white weiß blanco blanca",
        "black schwarz negro negra",
        "yellow gelb amarillo amarilla",
        "beautiful schön bonito bonita",
        "cold kalt frío fría",
        "long lang largo larga",
        "short kurz corto corta",
        "clean sauber limpio limpia",
        "dirty schmutzig sucio sucia",
        "cheap billig barato barata",
        "heavy schwer pesado pesada",
        "empty leer vacío vacía",
        "full voll lleno llena",
        "fast schnell rápido rápida",
        "slow langsam lento lenta",
        "quiet ruhig tranquilo tranquila",
        "modern modern moderno moderna",
        "strange seltsam extraño extraña",
        "wonderful wunderbar maravilloso maravillosa",
    )
]
PERSON_ADJECTIVES = [
    _a(s)
    for s in (
        "tired müde cansado cansada",
        "happy glücklich feliz feliz felices felices",
        "sad traurig triste triste",
        "young jung joven joven jóvenes jóvenes",
        "old alt viejo vieja",
        "friendly freundlich amable amable",
        "tall groß alto alta",
        "hungry hungrig hambriento hambrienta",
    )
]


@dataclass(frozen=True)
class Verb:
    en: str  # third person singular
    en_pl: str  # plural / first person
    de: str  # third person singular
    de_1: str  # first person singular
    de_pl: str  # plural
    es: str  # third person singular
    es_1: str  # first person singular
    es_pl: str  # first person plural


def _v(spec: str) -> Verb:
    return Verb(*spec.split())


# Transitive verbs that take any object in THINGS.
VERBS = [
    _v(s)
    for s in (
        "sees see sieht sehe sehen ve veo vemos",
        "buys buy kauft kaufe kaufen compra compro compramos",
        "has have hat habe haben tiene tengo tenemos",
        "finds find findet finde finden encuentra encuentro encontramos",
        "needs need braucht brauche brauchen necesita necesito necesitamos",
        "carries carry trägt trage tragen lleva llevo llevamos",
        "sells sell verkauft verkaufe verkaufen vende vendo vendemos",
        "cleans clean putzt putze putzen limpia limpio limpiamos",
        "paints paint malt male malen pinta pinto pintamos",
        "wants want will will wollen quiere quiero queremos",
        "forgets forget vergisst vergesse vergessen olvida olvido olvidamos",
        "loves love liebt liebe lieben ama amo amamos",
    )
]
# The verbs that also take a person or an animal as their object.
PERSON_VERBS = [v for v in VERBS if v.en in ("sees", "finds", "needs", "loves", "forgets")]
# English "wants the book" is "will das buch" in German and "quiere el libro" in Spanish.

NUMBERS = NUMBER_NAMES
DAYS = [
    ("monday", "montag", "lunes"),
    ("tuesday", "dienstag", "martes"),
    ("wednesday", "mittwoch", "miércoles"),
    ("thursday", "donnerstag", "jueves"),
    ("friday", "freitag", "viernes"),
    ("saturday", "samstag", "sábado"),
    ("sunday", "sonntag", "domingo"),
]
# German definite article and attributive adjective ending, by case and gender
# (weak declension after the definite article).
DE_DEF = {"nom": {"m": "der", "f": "die", "n": "das"}, "acc": {"m": "den", "f": "die", "n": "das"}}
DE_DEF_END = {"nom": {"m": "e", "f": "e", "n": "e"}, "acc": {"m": "en", "f": "e", "n": "e"}}
# Dative after "in": im (m, n) / in der (f).
DE_IN = {"m": "im", "f": "in der", "n": "im"}
DE_MY = {
    "nom": {"m": "mein", "f": "meine", "n": "mein"},
    "acc": {"m": "meinen", "f": "meine", "n": "mein"},
}
ES_DEF = {"m": "el", "f": "la"}
ES_DEF_PL = {"m": "los", "f": "las"}


def _de_noun(w: str) -> str:
    return w  # normalised text is lower case: German nouns lose their capital


def _es_adj(a: Adj, g: str, plural: bool = False) -> str:
    if plural:
        return a.es_pl_m if g == "m" else a.es_pl_f
    return a.es_m if g == "m" else a.es_f


def _es_in(place: Noun) -> str:
    return f"en {ES_DEF[place.es_g]} {place.es}"


def _es_obj(n: Noun) -> str:
    art = ES_DEF[n.es_g]
    if not n.thing:  # the personal "a": a + el -> al
        return f"al {n.es}" if art == "el" else f"a la {n.es}"
    return f"{art} {n.es}"


Triple = tuple[str, str, str]


class Grammar:
    """Draws parallel sentences from a seeded generator."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.templates = [
            self.adjective_is,
            self.is_in_place,
            self.there_are,
            self.subject_verbs_object,
            self.we_have,
            self.my_noun_is,
            self.plural_are,
            self.i_see_number,
            self.costs,
            self.leaves_at,
            self.today_is,
            self.person_is,
        ]

    def pick(self, items: list):  # noqa: ANN201 - any list element
        return items[int(self.rng.integers(len(items)))]

    def number(self, lo: int = 2, hi: int = 20) -> tuple[int, Triple]:
        keys = [k for k in NUMBERS if lo <= k <= hi]
        k = self.pick(keys)
        return k, NUMBERS[k]

    def sentence(self) -> Triple:
        """One sentence as (English, German, Spanish)."""
        return self.pick(self.templates)()

    # ------------------------------------------------------------------ templates
    def adjective_is(self) -> Triple:
        n, a, b = self.pick(THINGS), self.pick(ADJECTIVES), self.pick(ADJECTIVES)
        while b is a:
            b = self.pick(ADJECTIVES)
        g = n.de_g
        return (
            f"the {a.en} {n.en} is {b.en}",
            f"{DE_DEF['nom'][g]} {a.de}{DE_DEF_END['nom'][g]} {n.de} ist {b.de}",
            f"{ES_DEF[n.es_g]} {n.es} {_es_adj(a, n.es_g)} es {_es_adj(b, n.es_g)}",
        )

    def is_in_place(self) -> Triple:
        n = self.pick(THINGS + PEOPLE + ANIMALS)
        p = self.pick([x for x in PLACES if x.en != n.en])
        return (
            f"the {n.en} is in the {p.en}",
            f"{DE_DEF['nom'][n.de_g]} {n.de} ist {DE_IN[p.de_g]} {p.de}",
            f"{ES_DEF[n.es_g]} {n.es} está {_es_in(p)}",
        )

    def there_are(self) -> Triple:
        _, (en, de, es) = self.number()
        n = self.pick(THINGS + ANIMALS)
        p = self.pick([x for x in PLACES if x.en != n.en])
        return (
            f"there are {en} {n.en_pl} in the {p.en}",
            f"es gibt {de} {n.de_pl} {DE_IN[p.de_g]} {p.de}",
            f"hay {es} {n.es_pl} {_es_in(p)}",
        )

    def subject_verbs_object(self) -> Triple:
        s, v, o, a = self.pick(PEOPLE), self.pick(VERBS), self.pick(THINGS), self.pick(ADJECTIVES)
        return (
            f"the {s.en} {v.en} the {a.en} {o.en}",
            f"{DE_DEF['nom'][s.de_g]} {s.de} {v.de} {DE_DEF['acc'][o.de_g]} "
            f"{a.de}{DE_DEF_END['acc'][o.de_g]} {o.de}",
            f"{ES_DEF[s.es_g]} {s.es} {v.es} {ES_DEF[o.es_g]} {o.es} {_es_adj(a, o.es_g)}",
        )

    def we_have(self) -> Triple:
        _, (en, de, es) = self.number()
        n, v = self.pick(THINGS + ANIMALS), self.pick(VERBS)
        return (
            f"we {v.en_pl} {en} {n.en_pl}",
            f"wir {v.de_pl} {de} {n.de_pl}",
            f"{v.es_pl} {es} {n.es_pl}",
        )

    def my_noun_is(self) -> Triple:
        n, a = self.pick(THINGS + ANIMALS), self.pick(ADJECTIVES)
        return (
            f"my {n.en} is {a.en}",
            f"{DE_MY['nom'][n.de_g]} {n.de} ist {a.de}",
            f"mi {n.es} es {_es_adj(a, n.es_g)}",
        )

    def plural_are(self) -> Triple:
        n, a = self.pick(THINGS), self.pick(ADJECTIVES)
        return (
            f"the {n.en_pl} are {a.en}",
            f"die {n.de_pl} sind {a.de}",
            f"{ES_DEF_PL[n.es_g]} {n.es_pl} son {_es_adj(a, n.es_g, plural=True)}",
        )

    def i_see_number(self) -> Triple:
        _, (en, de, es) = self.number()
        n, a, v = self.pick(THINGS + ANIMALS), self.pick(ADJECTIVES), self.pick(VERBS)
        return (
            f"i {v.en_pl} {en} {a.en} {n.en_pl}",
            f"ich {v.de_1} {de} {a.de}e {n.de_pl}",
            f"{v.es_1} {es} {n.es_pl} {_es_adj(a, n.es_g, plural=True)}",
        )

    def costs(self) -> Triple:
        k, (en, de, es) = self.number(2, 100)
        n, a = self.pick(THINGS), self.pick(ADJECTIVES)
        g = n.de_g
        return (
            f"the {a.en} {n.en} costs {en} euros",
            f"{DE_DEF['nom'][g]} {a.de}{DE_DEF_END['nom'][g]} {n.de} kostet {de} euro",
            f"{ES_DEF[n.es_g]} {n.es} {_es_adj(a, n.es_g)} cuesta {es} euros",
        )

    def leaves_at(self) -> Triple:
        _, (en, de, es) = self.number(2, 12)
        day_en, day_de, day_es = self.pick(DAYS)
        return (
            f"on {day_en} the train leaves at {en} o'clock",
            f"am {day_de} fährt der zug um {de} uhr ab",
            f"el {day_es} el tren sale a las {es}",
        )

    def today_is(self) -> Triple:
        day_en, day_de, day_es = self.pick(DAYS)
        p = self.pick(PEOPLE)
        return (
            f"today is {day_en} and the {p.en} is at home",
            f"heute ist {day_de} und {DE_DEF['nom'][p.de_g]} {p.de} ist zu hause",
            f"hoy es {day_es} y {ES_DEF[p.es_g]} {p.es} está en casa",
        )

    def person_is(self) -> Triple:
        p, a = self.pick(PEOPLE), self.pick(PERSON_ADJECTIVES)
        v, o = self.pick(PERSON_VERBS), self.pick(PEOPLE + ANIMALS)
        while o is p:
            o = self.pick(PEOPLE + ANIMALS)
        return (
            f"the {a.en} {p.en} {v.en} the {o.en}",
            f"{DE_DEF['nom'][p.de_g]} {a.de}{DE_DEF_END['nom'][p.de_g]} {p.de} {v.de} "
            f"{DE_DEF['acc'][o.de_g]} {o.de}",
            f"{ES_DEF[p.es_g]} {p.es} {_es_adj(a, p.es_g)} {v.es} {_es_obj(o)}",
        )


def parallel(rng: np.random.Generator, n: int) -> list[Triple]:
    """``n`` parallel sentences (English, German, Spanish)."""
    g = Grammar(rng)
    return [g.sentence() for _ in range(n)]


def side(triple: Triple, lang: str) -> str:
    return triple[LANGS.index(lang)]


if __name__ == "__main__":
    for t in parallel(np.random.default_rng(0), int(sys.argv[1]) if len(sys.argv) > 1 else 10):
        print(" | ".join(t))
